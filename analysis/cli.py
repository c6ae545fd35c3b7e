"""``countlens geometry`` and ``countlens compare``: parse → config → run → save → draw."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from countlens.core.args import (
    NOTHING_TO_HIDE,
    HelpFormatter,
    add_common_options,
    add_config_options,
    config_values,
    threaded,
)
from countlens.core.fields import field_doc


def _window_text(window: tuple[int, int]) -> str:
    return f"{window[0]}:{window[1]}"


def _within(window: tuple[int, int], what: str, holder: str = "the data holds") -> str:
    """Help for a window whose default depends on the data (``pca_counts``, ``arc_counts``)."""
    return f"{what} (default: {_window_text(window)} within the counts {holder})"


def register(subparsers) -> None:
    from countlens.analysis.experiments import CompareConfig, GeometryConfig
    from countlens.analysis.geometry import ARC_COUNTS, PCA_COUNTS

    p = subparsers.add_parser(
        "geometry", help="count-centroid geometry per location: Figures 5 and 6, geometry.json",
        formatter_class=HelpFormatter,
        description="Adjacent-centroid gap ratio and effective-rank ratio (high vs low count window) at every\n"
                    "location, per seed and averaged over seeds (Figure 5; the ratio of the seed-pooled\n"
                    "centroids is stored too, as gap_ratio_pooled), and PCA of the seed-pooled count\n"
                    "centroids at four locations (Figure 6).")
    add_config_options(p, GeometryConfig, helps={"pca_counts": _within(PCA_COUNTS, field_doc(GeometryConfig, "pca_counts"))})
    p.add_argument("--out", required=True, help="output folder (required)")
    add_common_options(p, "threads", "quiet", threads=None, helps={"quiet": NOTHING_TO_HIDE})
    p.set_defaults(func=cmd_geometry)

    p = subparsers.add_parser(
        "compare", help="toy vs LLM: gap ratio, effective-rank ratio, endpoint angle, probe norm side by side",
        formatter_class=HelpFormatter,
        description="The same geometry metrics and probe cost on toy boundary representations and an LLM\n"
                    "capture, in one table (compare.json, compare.csv) and one figure. Ratios are of the\n"
                    "centroids pooled over seeds; probes are selected on validation and scored on test.")
    p.add_argument("--toy", required=True, action="append",
                   help="toy parameter JSON (countlens toy construct/train), a folder of them, or a toy "
                        "activation folder; repeat for several (required)")
    add_config_options(p, CompareConfig, [f.name for f in dataclasses.fields(CompareConfig) if f.name != "toy"],
                       helps={"pca_counts": _within(PCA_COUNTS, field_doc(CompareConfig, "pca_counts")),
                              "arc_counts": _within(ARC_COUNTS, field_doc(CompareConfig, "arc_counts"),
                                                    "every source holds")})
    p.add_argument("--out", required=True, help="output folder (required)")
    add_common_options(p, "threads", "quiet", threads=None, helps={"quiet": NOTHING_TO_HIDE})
    p.set_defaults(func=cmd_compare)


@threaded
def cmd_geometry(args) -> int:
    from countlens.analysis.experiments import GeometryConfig, run_geometry
    from countlens.analysis.figures import draw_geometry

    config = GeometryConfig(**config_values(args))
    result = run_geometry(config)
    out = Path(args.out)
    result.save(out)
    draw_geometry(result, out)
    print(f"{result.summary()}; wrote {out}/geometry.json, figure5.png, figure6.png")
    return 0


@threaded
def cmd_compare(args) -> int:
    from countlens.analysis.experiments import CompareConfig, run_compare
    from countlens.analysis.figures import draw_compare

    config = CompareConfig(toy=tuple(args.toy), **config_values(args))
    out = Path(args.out)
    result = run_compare(config, out)
    result.save(out)
    draw_compare(result, out)
    for llm_label, toy_label in result.closest_toy().items():
        print(f"compare: {llm_label} is closest to toy {toy_label} (pooled gap and effective-rank ratios)")
    print(f"compare: {len(result.rows)} sources; wrote {out}/compare.json, compare.csv, compare.png")
    return 0


__all__ = ["register", "cmd_geometry", "cmd_compare"]
