"""``countlens llm steer`` (Figure 9b): parse, build a :class:`SteeringConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, add_common_options, ints_text, parse_float_list
from countlens.core.fields import field_default
from countlens.llm.capture.options import add_capture_options, capture_options, names_list, parse_counts

STEER_COMMAND = ("batch_size", "answer_tokens", "device")

STEER_DESCRIPTION = """\
Figure 9b: steering at the boundary. Adds a step at the boundary at one location (default: the best location
of --probes) along each --direction, and along a random direction of the same norm (the control), for a grid
of delta, on the capture's own prompts with its own model; records the greedy answer, the expected count over
the capture's count range and log p(n + delta) (every candidate answer teacher-forced), and the step's share
of the boundary vector's norm.
  --units readout (the default, the probe's read-out units): delta * w / |w|^2 along the validation-selected
    ridge probe w of --probes (fitted on --acts, native coordinates): the probe reads exactly delta more. Where
    |w| is large (SmolLM2-135M: ~2,900 after block 1) these steps are tiny.
  --units count: every direction u (probe, mean-diff, random) scaled to delta * |v| * u / |u|, v the
    mean-difference direction (the least-squares slope of the capture's count centroids on n): a step of
    delta moves the vector as far as delta more items do on average.
Writes steering.json, steering.csv and fig9b_steering.png/.pdf.
"""


def register(sub) -> None:
    """Add ``steer`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.steering.experiment import UNITS, SteeringConfig

    def default(name):  # a SteeringConfig needs its capture (acts): its defaults are read without building one
        return field_default(SteeringConfig, name)

    st = sub.add_parser("steer", help="Figure 9b: steer the boundary vector along the probe or the mean difference, with a random control",
                        description=STEER_DESCRIPTION, formatter_class=HelpFormatter)
    st.add_argument("--acts", required=True, help="the capture to steer: its model and prompts, the capture the "
                                                  "probes were fitted on and, in count units, the one v is fitted on")
    st.add_argument("--probes", default=default("probes"), help="probes.json written by `countlens probe --acts` on that "
                                                        "capture (needed by --direction probe) (default: none)")
    st.add_argument("--out", required=True, help="output folder")
    st.add_argument("--location", default=None, help="the location to steer at: a name or index of the capture's "
                                                     "locations (default: the probes' best)")
    st.add_argument("--direction", dest="directions", default=",".join(default("directions")),
                    help="directions to steer along, comma-separated: probe (the ridge probe), mean-diff (the "
                         "slope of the count centroids on n; needs --units count); a random control is always added")
    st.add_argument("--units", choices=UNITS, default=default("units"),
                    help="readout: delta * w / |w|^2 (the probe reads delta more); count: delta * |v| along each "
                         "direction (as far as delta more items)")
    st.add_argument("--deltas", default=",".join(f"{d:g}" for d in default("deltas")),
                    help="steps delta, finite numbers, in --units")
    st.add_argument("--counts", default=ints_text(default("counts")), help=f"counts of the prompts to steer: {INT_LIST}")
    st.add_argument("--max-prompts", dest="max_prompts", type=int, default=default("max_prompts"),
                    help="most prompts steered (spread over --counts)")
    st.add_argument("--seed", type=int, default=default("seed"), help="seed of the random control direction")
    add_capture_options(st, STEER_COMMAND, SteeringConfig)
    add_common_options(st, "quiet")
    st.set_defaults(func=cmd_steer)


def cmd_steer(args) -> int:
    from countlens.llm.models import quiet_transformers
    from countlens.llm.steering.experiment import SteeringConfig, run_steering
    from countlens.llm.steering.figures import draw_steering

    quiet_transformers()
    config = SteeringConfig(acts=args.acts, probes=args.probes, location=args.location,
                            deltas=parse_float_list(args.deltas, "deltas"), counts=parse_counts(args.counts, "counts"),
                            max_prompts=args.max_prompts, seed=args.seed, directions=names_list(args.directions),
                            units=args.units, **capture_options(args, STEER_COMMAND))
    result = run_steering(config, progress=not args.quiet)
    result.save(args.out)
    draw_steering(result, args.out)
    steps = len(config.deltas)
    along = ", ".join(d for d in result.curves if d != "random")
    widest = max((c["mean_relative_norm"] or 0.0) for curve in result.curves.values() for c in curve)
    print(f"steered {len(result.rows) // (len(result.curves) * steps)} prompts along {along} (and a random "
          f"control) at {result.location} for {steps} steps in {result.units} units; the largest step is "
          f"{widest:.3g} of the boundary vector's norm -> {args.out}")
    return 0


__all__ = ["STEER_COMMAND", "register", "cmd_steer"]
