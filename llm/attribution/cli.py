"""``countlens llm attribution`` (Figure 15): parse, build an :class:`AttributionConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, add_common_options
from countlens.llm.capture.options import MODEL_OPTIONS, add_capture_options, capture_options

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
    from countlens.llm.attribution.experiment import DIRECTIONS, METHODS, AttributionConfig
    from countlens.llm.positions.experiment import FLIPS, POSITION_SETS

    ad = AttributionConfig()
    at = sub.add_parser("attribution", help="Figure 15: attribution patching of every residual, component and "
                                            "head cell, checked against activation patching",
                        description=ATTRIBUTION_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(at, ATTRIBUTION_COMMAND, ad, helps={
        "counts": f"counts n >= 1 of the clean prompts: {INT_LIST}",
        "locations": "residual locations of the cells: indices, ranges like 0:6, names, or all",
        "batch_size": "patched runs per forward (activation patching)"})
    at.add_argument("--method", dest="method", choices=METHODS, default=ad.method,
                    help="atp: attribution patching, the first-order estimate at the base run")
    at.add_argument("--direction", dest="direction", choices=DIRECTIONS, default=ad.direction,
                    help="noising: the twin's activations into the clean run; denoising: the clean run's into the "
                         "twin's (Figure 11)")
    at.add_argument("--flip", dest="flip", choices=FLIPS, default=ad.flip,
                    help="which target the twin turns into the distractor")
    at.add_argument("--positions", dest="positions", choices=POSITION_SETS, default=ad.positions,
                    help="all: every position from the first item to the boundary; items: the items and the boundary")
    at.add_argument("--location-step", dest="location_step", type=int, default=ad.location_step,
                    help="every k-th of --locations, the last always")
    at.add_argument("--layers", dest="layers", default=None,
                    help="blocks whose attention and MLP writes and heads are cells: 0-based indices, -1, ranges "
                         "like 0:5, or all (default: all)")
    at.add_argument("--top-k", dest="top_k", type=int, default=ad.top_k,
                    help="the top-k overlap compares the k cells of largest |effect| of each method")
    at.add_argument("--min-gap", dest="min_gap", type=float, default=ad.min_gap,
                    help="pairs whose clean and twin logit differences differ by less than this many nats are not "
                         "normalised")
    at.add_argument("--out", required=True, help="output folder")
    add_common_options(at, "quiet")
    at.set_defaults(func=cmd_attribution)


def cmd_attribution(args) -> int:
    from countlens.llm.attribution.experiment import GROUPS, AttributionConfig, run_attribution
    from countlens.llm.attribution.figures import draw_attribution
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = AttributionConfig().with_options(
        **capture_options(args, ATTRIBUTION_COMMAND), method=args.method, direction=args.direction, flip=args.flip,
        positions=args.positions, location_step=args.location_step, layers=args.layers, top_k=args.top_k,
        min_gap=args.min_gap)
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
