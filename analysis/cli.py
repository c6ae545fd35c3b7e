"""``countlens geometry``, ``countlens compare`` and ``countlens reproduce``: parse, call, write."""

from __future__ import annotations

import argparse
import csv
import io
import math
from pathlib import Path

import numpy as np

from countlens.errors import UsageError
from countlens.io import provenance, read_json, save_figure, write_json_atomic, write_text_atomic


def parse_window(text: str, name: str) -> tuple[int, int]:
    """``"91:100"`` -> (91, 100), inclusive."""
    parts = str(text).split(":")
    try:
        lo, hi = (int(p) for p in parts)
    except ValueError:
        raise UsageError(f"{name} must be an inclusive count range like 1:10, got {text!r}") from None
    if hi <= lo or lo < 0:
        raise UsageError(f"{name} must be lo:hi with 0 <= lo < hi, got {text!r}")
    return lo, hi


def _add_window_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--low", default="1:10", help="low count window, inclusive (default 1:10)")
    p.add_argument("--high", default="91:100", help="high count window, inclusive (default 91:100)")
    p.add_argument("--pca-counts", default="1:100", help="counts whose centroids enter the PCA (default 1:100)")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "geometry", help="count-centroid geometry per location: Figures 5 and 6, geometry.json",
        description="Adjacent-centroid gap ratio, effective-rank ratio (high vs low count window) at every "
                    "location, and PCA of the count centroids at four locations.")
    p.add_argument("--acts", required=True, help="activation folder (countlens llm capture, or toy export)")
    p.add_argument("--out", required=True, help="output folder")
    _add_window_args(p)
    p.add_argument("--pca-locations", default=None,
                   help="locations for Figure 6, indices or names (default: embeddings, after block 1, "
                        "middle block, last block)")
    p.set_defaults(func=run_geometry)

    p = subparsers.add_parser(
        "compare", help="toy vs LLM: gap ratio, effective-rank ratio, arc angle, probe norm side by side",
        description="The same geometry metrics and probe cost on toy boundary representations and an LLM "
                    "capture, in one table (compare.json, compare.csv) and one figure.")
    p.add_argument("--toy", required=True, action="append",
                   help="toy parameter JSON (countlens toy construct/train), a folder of them, or a toy "
                        "activation folder; repeat for several")
    p.add_argument("--acts", required=True, help="LLM activation folder (countlens llm capture)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--locations", default=None,
                   help="LLM locations to compare, indices or names (default: Figure 6's four)")
    p.add_argument("--toy-L", type=int, default=100, help="toy domain n + m <= L for parameter files (default 100)")
    p.add_argument("--arc-counts", default="1:100", help="counts whose end points give the arc angle (default 1:100)")
    _add_window_args(p)
    p.set_defaults(func=run_compare)

    from countlens.analysis.report import register_reproduce

    register_reproduce(subparsers)


# ---------------------------------------------------------------- geometry

def _load(acts: str):
    from countlens.store import capture_meta, load_capture

    ds = load_capture(acts)
    meta = capture_meta(ds)
    locations = list(meta.get("locations") or [])
    if not locations:
        raise UsageError(f"{acts}/meta.json names no locations")
    return ds, meta, locations


def _location_list(text: str | None, locations: list[str]) -> list[int] | None:
    from countlens.analysis.layerwise import resolve_location

    if text is None:
        return None
    return [resolve_location(t, locations) for t in str(text).split(",") if t.strip()]


def _csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def run_geometry(args) -> int:
    from countlens.analysis.layerwise import centroids_from_capture, compute_geometry

    low, high = parse_window(args.low, "--low"), parse_window(args.high, "--high")
    pca_counts = parse_window(args.pca_counts, "--pca-counts")
    ds, meta, locations = _load(args.acts)
    pca_locations = _location_list(args.pca_locations, locations)
    cs = centroids_from_capture(ds, locations)
    result = compute_geometry(cs, low, high, pca_counts, pca_locations)
    result.source = {"acts": str(args.acts), "model": meta.get("model"), "rows": len(ds),
                     "config_names": sorted(set(ds["config"])), "pairs": sorted(set(ds["pair"]))}
    write_geometry(result, Path(args.out), {"acts": str(args.acts), "low": low, "high": high,
                                            "pca_counts": pca_counts, "pca_locations": pca_locations})
    finite = [r for r in result.per_location if math.isfinite(r["gap_ratio"])]
    best = (f"largest gap ratio {max(r['gap_ratio'] for r in finite):.3g} at "
            f"{max(finite, key=lambda r: r['gap_ratio'])['name']}" if finite else "no finite gap ratio")
    flat = [r["name"] for r in result.per_location if r["mean_gap_low"] == 0]
    print(f"geometry: {len(locations)} locations, {len(cs.seeds)} seed(s), counts "
          f"{result.counts[0]}..{result.counts[-1]}; {best}; wrote {args.out}/geometry.json, figure5.png, "
          "figure6.png" + (f"; counts do not move the representation at {', '.join(flat)} (ratios are nan)"
                           if flat else ""))
    return 0


def write_geometry(result, out: Path, config: dict) -> None:
    """geometry.json (with provenance), the CSVs behind Figures 5 and 6, and the figures."""
    from countlens.analysis.figures import plot_figure5, plot_figure6

    out.mkdir(parents=True, exist_ok=True)
    fig5 = [[r["index"], r["name"], r["gap_ratio"], r["gap_ratio_min"], r["gap_ratio_max"], r["erank_ratio"],
             r["erank_ratio_min"], r["erank_ratio_max"]] for r in result.per_location]
    write_text_atomic(out / "figure5.csv", _csv(
        ["location", "name", "gap_ratio", "gap_ratio_min", "gap_ratio_max", "erank_ratio", "erank_ratio_min",
         "erank_ratio_max"], fig5))
    fig6 = [[p["index"], p["name"], c, x, y] for p in result.pca for c, (x, y) in zip(p["counts"], p["coords"], strict=True)]
    write_text_atomic(out / "figure6.csv", _csv(["location", "name", "n", "pc1", "pc2"], fig6))
    save_figure(plot_figure5(result), out / "figure5")
    save_figure(plot_figure6(result), out / "figure6")
    write_json_atomic(out / "geometry.json", {**result.to_dict(), "provenance": provenance(config)})


# ---------------------------------------------------------------- compare

def _toy_sources(specs: list[str], toy_L: int, out: Path) -> list[tuple[str, Path, dict]]:
    """(label, activation folder, read-out info) for every ``--toy`` argument; parameter files are exported
    to ``out/toy-acts/<stem>`` (reused when already there)."""
    sources: list[tuple[str, Path, dict]] = []
    files: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir() and (path / "meta.json").is_file():
            sources.append((_toy_label_from_acts(path), path,
                            _toy_readout(read_json(path / "meta.json", "toy activation metadata"))))
        elif path.is_dir():
            found = [f for f in sorted(path.glob("*.json")) if _is_toy_params(f)]
            if not found:
                raise UsageError(f"--toy {spec}: the folder holds no parameter JSON files and no meta.json")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"--toy {spec} does not exist; pass a parameter JSON from `countlens toy construct`")
    for path in files:
        from countlens.toy.export import export_toy_activations, toy_params_from_json

        data = read_json(path, "toy parameter file")
        try:
            cfg, params = toy_params_from_json(data, L=toy_L)
        except UsageError as exc:
            raise UsageError(f"--toy {path}: {exc}") from None
        label = f"{cfg.variant} ({path.stem})" if path.stem != cfg.variant else cfg.variant
        dest = out / "toy-acts" / path.stem
        export_toy_activations(cfg, params, dest, L=toy_L, seed=0)  # reuses a finished export
        sources.append((label, dest, _toy_readout(data)))
    labels = [label for label, _, _ in sources]
    if len(set(labels)) != len(labels):
        sources = [(f"{label} [{i}]", p, info) for i, (label, p, info) in enumerate(sources)]
    return sources


def _is_toy_params(path: Path) -> bool:
    """Whether a JSON file in a ``--toy`` folder holds toy parameters (other JSON files are skipped)."""
    try:
        data = read_json(path)
    except UsageError:
        return False
    return isinstance(data, dict) and ("x_b" in data or isinstance(data.get("params"), dict))


def _toy_readout(data: dict) -> dict:
    """The toy's own regression read-out norm ``|w|`` and whether its full-domain check passed, from a
    parameter JSON (``countlens toy construct``: ``check.passed``; ``toy train``: ``passed``) or an
    export's metadata; None where they are absent."""
    params = data.get("params") if isinstance(data.get("params"), dict) else data
    w = params.get("w")
    check = data.get("check") if isinstance(data.get("check"), dict) else {}
    passed = check.get("passed", data.get("passed"))
    return {"readout_norm": float(np.linalg.norm(np.asarray(w, dtype=float))) if w is not None else None,
            "readout_passed": passed if isinstance(passed, bool) else None}


def _toy_label_from_acts(path: Path) -> str:
    meta = read_json(path / "meta.json", "toy activation metadata")
    for key in ("variant", "config", "model"):
        if isinstance(meta.get(key), str):
            return meta[key]
    return path.name


def run_compare(args) -> int:
    from countlens.analysis.compare import REL_ALPHAS, TEST_FRACTION, CompareResult, source_metrics
    from countlens.analysis.figures import _short
    from countlens.analysis.layerwise import centroids_from_capture, default_pca_locations, location_matrix

    low, high = parse_window(args.low, "--low"), parse_window(args.high, "--high")
    pca_counts = parse_window(args.pca_counts, "--pca-counts")
    arc_counts = parse_window(args.arc_counts, "--arc-counts")
    if args.toy_L < 1:
        raise UsageError(f"--toy-L must be >= 1, got {args.toy_L}")
    out = Path(args.out)
    ds, meta, locations = _load(args.acts)
    llm_locations = _location_list(args.locations, locations) or default_pca_locations(len(locations))
    llm_cs = centroids_from_capture(ds, locations)  # before the toy export: bad LLM input fails first
    toy = _toy_sources(args.toy, args.toy_L, out)
    windows = {"low": low, "high": high, "arc_counts": arc_counts, "pca_counts": pca_counts}
    rows = []
    for label, path, readout in toy:
        tds, _, tlocs = _load(str(path))
        li = len(tlocs) - 1  # the toy's read-out representation is its last location
        X, y = location_matrix(tds, li)
        try:
            metrics = source_metrics(centroids_from_capture(tds, tlocs), li, X, y, **windows)
        except UsageError as exc:
            raise UsageError(f"toy {label}: {exc} (or pass --toy-L >= {high[1]})") from None
        rows.append({"label": label, "kind": "toy", "source": str(path), "location": tlocs[li], **metrics,
                     **readout})
    model = meta.get("model") or "LLM"
    for li in llm_locations:
        X, y = location_matrix(ds, li)
        metrics = source_metrics(llm_cs, li, X, y, **windows)
        rows.append({"label": f"LLM {_short(locations[li])}", "kind": "llm", "source": str(args.acts),
                     "location": locations[li], "model": model, **metrics,
                     "readout_norm": None, "readout_passed": None})
    result = CompareResult(rows=rows, low_window=list(low), high_window=list(high), arc_counts=list(arc_counts),
                           pca_counts=list(pca_counts),
                           probe={"rel_alphas": REL_ALPHAS.tolist(), "test_fraction": TEST_FRACTION,
                                  "split_seed": 0, "criterion": "held-out rounded accuracy == 1"})
    write_compare(result, out, {"toy": args.toy, "acts": args.acts, "toy_L": args.toy_L, **windows})
    for llm_label, toy_label in result.closest_toy().items():
        print(f"compare: {llm_label} is closest to toy {toy_label} (gap and effective-rank ratios)")
    print(f"compare: {len(rows)} sources; wrote {out}/compare.json, compare.csv, compare.png")
    return 0


def write_compare(result, out: Path, config: dict) -> None:
    from countlens.analysis.figures import plot_compare

    out.mkdir(parents=True, exist_ok=True)
    header = ["label", "kind", "location", "gap_ratio", "erank_ratio", "arc_angle", "probe_norm",
              "probe_best_acc", "probe_norm_at_best", "readout_norm", "readout_passed"]
    rows = [[r.get(k) if r.get(k) is not None else "" for k in header] for r in result.rows]
    write_text_atomic(out / "compare.csv", _csv(header, rows))
    save_figure(plot_compare(result), out / "compare")
    write_json_atomic(out / "compare.json", {**result.to_dict(), "closest_toy": result.closest_toy(),
                                             "provenance": provenance(config)})


__all__ = ["register", "run_geometry", "run_compare", "write_geometry", "write_compare", "parse_window"]
