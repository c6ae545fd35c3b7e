"""``countlens llm attribution`` (Figure 15): parse, build an :class:`AttributionConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, add_common_options, config_values, threaded
from countlens.llm.capture.options import MODEL_OPTIONS, add_capture_options

ATTRIBUTION_COMMAND = (*MODEL_OPTIONS, "task", "L", "counts", "per_count", "pairs", "configs", "seeds", "template",
                       "locations", "batch_size", "device", "dtype")
ATTRIBUTION_DESCRIPTION = """\
Figure 15: attribution patching (AtP) checked against activation patching. Each clean prompt (--counts, n >= 1
targets) has a twin with one target (--flip) turned into the distractor. noising patches the twin's activations
into the clean run, denoising the clean run's into the twin's (Figure 11's direction). Cells: the residual
stream at a location and a position (Figure 11's grid: --locations, --location-step, --positions), each block's
attention and MLP write at one position and at every position at once (--layers), and each head at the
boundary and at every position at once. AtP estimates every cell's change of LD = log p("n") - log p("n - 1")
(every answer token teacher-forced) from one forward and one backward per pair, (a_source - a_base) . dLD/da
at the base run; the same run patches every cell and reports per group (residual, attention/MLP, heads)
Spearman's rho, the top-k overlap (--top-k) and the speed ratio. Architectures whose attention and MLP writes
or attention output projection the hook-site registry does not know, and blocks the model lacks, are refused
before the weights load. Writes attribution.json, attribution.csv and fig15_attribution.png/.pdf.
"""


def register(sub) -> None:
    """Add ``attribution`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.attribution.experiment import AttributionConfig

    ad = AttributionConfig()
    at = sub.add_parser("attribution", help="Figure 15: attribution patching of every residual, component and "
                                            "head cell, checked against activation patching",
                        description=ATTRIBUTION_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(at, (*ATTRIBUTION_COMMAND, "method", "direction", "flip", "positions", "location_step",
                             "layers", "top_k", "min_gap"), ad, helps={
        "counts": f"counts n >= 1 of the clean prompts: {INT_LIST}",
        "locations": "residual locations of the cells: indices, ranges like 0:6, names, or all",
        "batch_size": "patched runs per forward (activation patching)"})
    at.add_argument("--out", required=True, help="output folder")
    add_common_options(at, "quiet", "threads", threads=None)
    at.set_defaults(func=cmd_attribution)


@threaded
def cmd_attribution(args) -> int:
    from countlens.llm.attribution.experiment import GROUPS, AttributionConfig, run_attribution
    from countlens.llm.attribution.figures import draw_attribution
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = AttributionConfig().with_options(**config_values(args))
    result = run_attribution(config, progress=not args.quiet)
    result.save(args.out)
    draw_attribution(result, args.out)
    parts = []
    for group in GROUPS:
        a = result.agreement[group]
        rho = "n/a" if a["spearman"] is None else f"{a['spearman']:.2f}"
        overlap = "n/a" if a["top_k_overlap"] is None else f"{a['top_k_overlap']:.2f}"
        parts.append(f"{group}: rho {rho}, top-{a['top_k']} overlap {overlap}, {a['speed_ratio']:.1f}x")
    print(f"attribution: {len(result.pairs)} pairs, {len(result.cells)} cells; AtP {result.atp_seconds:.2f} s vs "
          f"activation patching {result.act_seconds:.2f} s ({result.speed_ratio:.1f}x); {'; '.join(parts)} -> "
          f"{args.out}")
    return 0


__all__ = ["ATTRIBUTION_COMMAND", "register", "cmd_attribution"]
