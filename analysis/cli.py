"""``countlens geometry`` and ``countlens compare``: parse → config → run → save → draw."""

from __future__ import annotations

import argparse
from pathlib import Path

from countlens.core.args import HelpFormatter, parse_window


def _window_text(window: tuple[int, int]) -> str:
    return f"{window[0]}:{window[1]}"


def _add_window_args(p: argparse.ArgumentParser) -> None:
    from countlens.analysis.geometry import HIGH_WINDOW, LOW_WINDOW, PCA_COUNTS

    p.add_argument("--low", default=_window_text(LOW_WINDOW), help="low count window, inclusive")
    p.add_argument("--high", default=_window_text(HIGH_WINDOW), help="high count window, inclusive")
    p.add_argument("--pca-counts", default=None,
                   help="counts whose centroids enter the PCA (default: "
                        f"{_window_text(PCA_COUNTS)} within the counts the data holds)")


def register(subparsers) -> None:
    from countlens.analysis.geometry import ARC_COUNTS

    p = subparsers.add_parser(
        "geometry", help="count-centroid geometry per location: Figures 5 and 6, geometry.json",
        formatter_class=HelpFormatter,
        description="Adjacent-centroid gap ratio and effective-rank ratio (high vs low count window) at every\n"
                    "location, per seed and averaged over seeds (Figure 5; the ratio of the seed-pooled\n"
                    "centroids is stored too, as gap_ratio_pooled), and PCA of the seed-pooled count\n"
                    "centroids at four locations (Figure 6).")
    p.add_argument("--acts", required=True, help="activation folder (countlens llm capture, or toy export; required)")
    p.add_argument("--out", required=True, help="output folder (required)")
    _add_window_args(p)
    p.add_argument("--pca-locations", default=None,
                   help="locations for Figure 6, indices or names (default: embeddings, after block 1, "
                        "middle block, last block)")
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
    p.add_argument("--acts", required=True, help="LLM activation folder (countlens llm capture; required)")
    p.add_argument("--out", required=True, help="output folder (required)")
    p.add_argument("--locations", default=None,
                   help="LLM locations to compare, indices or names (default: Figure 6's four)")
    p.add_argument("--toy-L", dest="toy_L", type=int, default=None,
                   help="toy domain n + m <= L for parameter files (default: the capture's largest count)")
    p.add_argument("--arc-counts", default=None,
                   help="counts whose end points give the endpoint angle (default: "
                        f"{_window_text(ARC_COUNTS)} within the counts every source holds)")
    _add_window_args(p)
    p.set_defaults(func=cmd_compare)


def _window(text: str | None, field: str) -> tuple[int, int] | None:
    return None if text is None else parse_window(text, field)


def _windows(args) -> dict[str, tuple[int, int] | None]:
    return {name: _window(getattr(args, name), name) for name in ("low", "high", "pca_counts")}


def cmd_geometry(args) -> int:
    from countlens.analysis.experiments import GeometryConfig, run_geometry
    from countlens.analysis.figures import draw_geometry

    config = GeometryConfig(acts=args.acts, pca_locations=args.pca_locations, **_windows(args))
    result = run_geometry(config)
    out = Path(args.out)
    result.save(out)
    draw_geometry(result, out)
    print(f"{result.summary()}; wrote {out}/geometry.json, figure5.png, figure6.png")
    return 0


def cmd_compare(args) -> int:
    from countlens.analysis.experiments import CompareConfig, run_compare
    from countlens.analysis.figures import draw_compare

    config = CompareConfig(toy=tuple(args.toy), acts=args.acts, locations=args.locations, toy_L=args.toy_L,
                           arc_counts=_window(args.arc_counts, "arc_counts"), **_windows(args))
    out = Path(args.out)
    result = run_compare(config, out)
    result.save(out)
    draw_compare(result, out)
    for llm_label, toy_label in result.closest_toy().items():
        print(f"compare: {llm_label} is closest to toy {toy_label} (pooled gap and effective-rank ratios)")
    print(f"compare: {len(result.rows)} sources; wrote {out}/compare.json, compare.csv, compare.png")
    return 0


__all__ = ["register", "cmd_geometry", "cmd_compare"]
