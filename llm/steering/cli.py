"""``countlens llm steer`` (Figure 9b): parse, build a :class:`SteeringConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, Option, add_common_options, config_values, threaded
from countlens.llm.capture.options import add_capture_options

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
    from countlens.llm.steering.experiment import SteeringConfig

    st = sub.add_parser("steer", help="Figure 9b: steer the boundary vector along the probe or the mean difference, with a random control",
                        description=STEER_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(st, ("acts", "probes", "location", "directions", "units", "deltas", "counts", "max_prompts",
                             "seed", *STEER_COMMAND), SteeringConfig,
                        helps={"counts": f"counts of the prompts to steer: {INT_LIST}"},
                        options={"acts": Option("acts", required=True), "directions": Option("directions",
                                                                                               alias="--direction")})
    st.add_argument("--out", required=True, help="output folder")
    add_common_options(st, "quiet", "threads", threads=None)
    st.set_defaults(func=cmd_steer)


@threaded
def cmd_steer(args) -> int:
    from countlens.llm.models import quiet_transformers
    from countlens.llm.steering.experiment import SteeringConfig, run_steering
    from countlens.llm.steering.figures import draw_steering

    quiet_transformers()
    config = SteeringConfig(**config_values(args))
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
