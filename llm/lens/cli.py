"""``countlens llm lens`` (Figure 13): parse, build a :class:`LensConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, Option, add_common_options, config_values
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

    le = sub.add_parser("lens", help="Figure 13: logit and tuned lenses at the boundary, count directions vs the "
                                     "unembedding", description=LENS_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(le, ("acts", "probes", "locations", "counts", "alphas", "seed", "fractions",
                             "baseline_directions", "device"), LensConfig,
                        helps={"counts": f"candidate answers: {INT_LIST} (default: the capture's count range)"},
                        options={"acts": Option("acts", required=True), "fractions": Option("fractions", alias="--split"),
                                 "counts": Option("counts", parse=parse_counts)})
    le.add_argument("--out", required=True, help="output folder")
    add_common_options(le, "threads", "quiet", threads=field_default(LensConfig, "threads"))
    le.set_defaults(func=cmd_lens)


def cmd_lens(args) -> int:
    from countlens.llm.lens.experiment import LensConfig, run_lens
    from countlens.llm.lens.figures import draw_lens
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = LensConfig(**config_values(args), threads=args.threads)
    result = run_lens(config, progress=not args.quiet)
    result.save(args.out)
    draw_lens(result, args.out)
    tuned = max(result.locations, key=lambda loc: -1e9 if loc["tuned"]["logprob"] is None else loc["tuned"]["logprob"])
    at = result.read_at["answer_position"]
    where = f" (read at answer position {at}, after {result.read_at['prefix_text']!r}: every answer begins with it)" \
        if at else ""
    print(f"lenses at {len(result.locations)} locations on {result.split['n_test']} test prompts{where}; the tuned "
          f"lens reads the correct first token best at {tuned['label']} (log p {tuned['tuned']['logprob']:.3f}; the "
          f"model's own {result.model_readout['logprob']:.3f}) -> {args.out}")
    return 0


__all__ = ["register", "cmd_lens"]
