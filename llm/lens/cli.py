"""``countlens llm lens`` (Figure 13): parse, build a :class:`LensConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, add_common_options, parse_float_list
from countlens.core.fields import field_default
from countlens.llm.capture.options import add_capture_options, parse_counts

LENS_DESCRIPTION = """\
Figure 13: lenses at the boundary. Every location's boundary vector of the capture --acts is read as if it were
the last block's output: through the model's own final norm and unembedding (the logit lens; at the last
location it is the model's own next-token distribution), and through a tuned lens, an affine map to the last
location fitted by ridge on the training prompts (the probes' split rule), alpha chosen on the validation prompts
by the KL from the model's own answer-start distribution. Scored on the test prompts: the correct count's
first-token log-probability and its rank among the candidates' first tokens, and the expected count over the
single-token candidates. Also the angle between the count directions (the ridge probes of --probes, and the
mean-difference direction: the slope of the count centroids on n) and the number tokens' unembedding rows, raw
and through the final norm, against random directions. No prompt is run: the model is loaded for its head.
Writes lens.json, lens.csv, angles.csv and fig13_lens.png/.pdf.
"""


def register(sub) -> None:
    """Add ``lens`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.lens.experiment import LensConfig

    def default(name):  # a LensConfig needs its capture (acts): its defaults are read without building one
        return field_default(LensConfig, name)

    le = sub.add_parser("lens", help="Figure 13: logit and tuned lenses at the boundary, count directions vs the "
                                     "unembedding", description=LENS_DESCRIPTION, formatter_class=HelpFormatter)
    le.add_argument("--acts", required=True, help="a capture folder made by `countlens llm capture` (its model is "
                                                  "recorded) with the last location")
    le.add_argument("--probes", default=None, help="probes.json fitted on that capture: its probes are compared "
                                                   "with the unembedding too (default: none)")
    le.add_argument("--out", required=True, help="output folder")
    le.add_argument("--locations", default=None, help="the capture's locations to read: names, indices, ranges "
                                                      "like 0:6, or all (default: all)")
    le.add_argument("--counts", default=None, help=f"candidate answers: {INT_LIST} (default: the capture's count "
                                                   "range)")
    le.add_argument("--alphas", default=",".join(f"{a:g}" for a in default("alphas")),
                    help="the tuned lens's relative ridge penalties (multiples of the mean eigenvalue of the "
                         "standardised design), comma-separated")
    le.add_argument("--seed", type=int, default=default("seed"), help="split seed")
    le.add_argument("--split", dest="fractions", default=",".join(f"{f:g}" for f in default("fractions")),
                    help="train,validation,test fractions")
    le.add_argument("--baseline-directions", dest="baseline_directions", type=int, default=default("baseline_directions"),
                    help="random directions of the angle baseline")
    add_common_options(le, "threads", threads=default("threads"))
    add_capture_options(le, ("device",), LensConfig)
    add_common_options(le, "quiet")
    le.set_defaults(func=cmd_lens)


def cmd_lens(args) -> int:
    from countlens.llm.lens.experiment import LensConfig, run_lens
    from countlens.llm.lens.figures import draw_lens
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = LensConfig(acts=args.acts, probes=args.probes, locations=args.locations,
                        counts=None if args.counts is None else parse_counts(args.counts, "counts"),
                        alphas=parse_float_list(args.alphas, "alphas"), seed=args.seed,
                        fractions=parse_float_list(args.fractions, "fractions"),
                        baseline_directions=args.baseline_directions, device=args.device,
                        threads=args.threads)
    result = run_lens(config, progress=not args.quiet)
    result.save(args.out)
    draw_lens(result, args.out)
    tuned = max(result.locations, key=lambda loc: -1e9 if loc["tuned"]["logprob"] is None else loc["tuned"]["logprob"])
    print(f"lenses at {len(result.locations)} locations on {result.split['n_test']} test prompts; the tuned lens "
          f"reads the correct first token best at {tuned['label']} (log p {tuned['tuned']['logprob']:.3f}; the "
          f"model's own {result.model_readout['logprob']:.3f}) -> {args.out}")
    return 0


__all__ = ["register", "cmd_lens"]
