"""``countlens probe``: validation-selected ridge probes per location (``probes.json``, Figure 7, layerwise
plot); ``countlens probe sweep`` (Figure 8); ``countlens probe toy-acts`` (toy representations as a capture).

``countlens probe --acts DIR ...`` runs the probes; ``sweep`` and ``toy-acts`` are subcommands of the same
parser, so both spellings of the issue work.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
from pathlib import Path

from countlens.args import parse_float_list, parse_int_list
from countlens.errors import UsageError
from countlens.io import read_json, save_figure, write_json_atomic, write_text_atomic

_RUN_DESCRIPTION = ("Fit ridge probes of the count on the boundary vector at every location: the whole alpha "
                    "grid from one decomposition per location and seed, alpha chosen on a validation split, "
                    "rounded exact accuracy on the IID test split. Writes probes.json, probes.csv, "
                    "fig7_binned_accuracy.png/.pdf and probes_layerwise.png/.pdf.")


def _split(text: str) -> tuple[float, float, float]:
    try:
        parts = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3:
        raise UsageError(f"--split must be three fractions like 0.6,0.2,0.2, got {text!r}")
    return parts  # validated by split_rows


def register(subparsers) -> None:
    parser = subparsers.add_parser("probe", help="ridge probes of the count per location (Figures 7 and 8)",
                                   description=_RUN_DESCRIPTION)
    # Shared flags use SUPPRESS in the subcommands so `probe --acts X sweep ...` keeps X.
    parser.add_argument("--acts", help="activation folder (from `countlens llm capture` or `probe toy-acts`)")
    parser.add_argument("--locations", default=None,
                        help="names or indices, comma-separated, or a range like 0:10 (default: all)")
    parser.add_argument("--alphas", default=None,
                        help="ridge penalties: lo:hi:count log grid or comma list (default 1e-6:1e4:41)")
    parser.add_argument("--seeds", default="0,1,2", help="split seeds (default 0,1,2)")
    parser.add_argument("--split", default="0.6,0.2,0.2", help="train,validation,test fractions")
    parser.add_argument("--no-standardize", dest="standardize", action="store_false",
                        help="fit on raw activations instead of per-dimension z-scores")
    parser.add_argument("--classifier", action="store_true",
                        help="also fit the multinomial logistic read-out over counts (slower: one fit per "
                             "location and seed)")
    parser.add_argument("--classifier-C", dest="classifier_C", default="1",
                        help="inverse L2 strength of that classifier, or a comma list chosen on validation "
                             "accuracy (default 1)")
    parser.add_argument("--figure-locations", default=None,
                        help="locations drawn in Figure 7 (default: the best by validation accuracy)")
    parser.add_argument("--out", help="output folder")
    parser.set_defaults(func=run_probe_command)
    sub = parser.add_subparsers(dest="probe_command", metavar="{sweep,toy-acts,redraw}",
                                parser_class=type(parser))

    sweep = sub.add_parser("sweep", help="Figure 8: native probe norm vs held-out accuracy along the alpha grid",
                           description="Fit one probe per alpha (and the unregularised one) at one location "
                                       "for each split seed; writes sweep.json and fig8_norm_sweep.png/.pdf.")
    sweep.add_argument("--acts", default=argparse.SUPPRESS, help="activation folder")
    sweep.add_argument("--location", default=None,
                       help="name or index (default: the output of the first block; 'h' for the toy)")
    sweep.add_argument("--alphas", default=argparse.SUPPRESS,
                       help="lo:hi:count log grid or comma list (default 1e-6:1e6:49)")
    sweep.add_argument("--seeds", default=argparse.SUPPRESS, help="split seeds (default 0,1,2)")
    sweep.add_argument("--split", default=argparse.SUPPRESS, help="train,validation,test fractions")
    sweep.add_argument("--no-standardize", dest="standardize", action="store_false", default=argparse.SUPPRESS,
                       help="fit on raw activations instead of per-dimension z-scores")
    sweep.add_argument("--out", default=argparse.SUPPRESS, help="output folder")
    sweep.set_defaults(func=run_sweep_command)

    toy = sub.add_parser("toy-acts", help="write the toy's boundary representations as an activation folder",
                         description="Evaluate toy parameters (from `countlens toy construct` or `toy train`) "
                                     "on every pair n + m <= L and write attn_out and h per pair in the "
                                     "capture format, so probe and geometry commands run on the toy.")
    toy.add_argument("--params", required=True, help="toy parameter JSON")
    toy.add_argument("--L", type=int, default=None, help="maximum length (default: the file's L)")
    toy.add_argument("--seed", type=int, default=0, help="value of the seed column (default 0)")
    toy.add_argument("--out", default=argparse.SUPPRESS, help="output folder")
    toy.set_defaults(func=run_toy_acts_command)

    redraw = sub.add_parser("redraw", help="redraw Figures 7/8 from probes.json or sweep.json, without refitting",
                            description="Redraw the figures of a finished run from its JSON.")
    redraw.add_argument("--result", required=True, help="probes.json or sweep.json")
    redraw.add_argument("--figure-locations", default=argparse.SUPPRESS,
                        help="locations drawn in Figure 7 (names, comma-separated)")
    redraw.add_argument("--out", default=argparse.SUPPRESS, help="output folder (default: beside the JSON)")
    redraw.set_defaults(func=run_redraw_command)


def _require(args, *names: str) -> None:
    for name in names:
        if getattr(args, name, None) in (None, ""):
            raise UsageError(f"--{name} is required")


def _seeds(args) -> list[int]:
    return parse_int_list(args.seeds, "--seeds")


def run_probe_command(args) -> int:
    from countlens.probes.experiments import (
        DEFAULT_ALPHAS,
        load_probe_data,
        parse_alphas,
        resolve_locations,
        run_probes,
    )
    from countlens.probes.figures import plot_binned_accuracy, plot_layerwise

    _require(args, "acts", "out")
    alphas = parse_alphas(args.alphas or DEFAULT_ALPHAS)
    seeds, fractions = _seeds(args), _split(args.split)
    data = load_probe_data(args.acts)
    indices = resolve_locations(data.locations, args.locations)
    figure_locations = None
    if args.figure_locations:
        figure_locations = [data.locations[i] for i in resolve_locations(data.locations, args.figure_locations)]
        missing = [name for name in figure_locations if name not in [data.locations[i] for i in indices]]
        if missing:
            raise UsageError(f"--figure-locations {', '.join(missing)} not among the probed --locations")
    out = Path(args.out)
    classifier_C = parse_float_list(args.classifier_C, "--classifier-C")
    if args.classifier and not all(math.isfinite(c) and c > 0 for c in classifier_C):
        raise UsageError(f"--classifier-C values must be > 0, got {args.classifier_C}")
    result = run_probes(data, indices, alphas, seeds, fractions, standardize=args.standardize,
                        classifier_C=classifier_C if args.classifier else None,
                        partial_dir=out / "partial", progress=True)
    write_json_atomic(out / "probes.json", result.to_dict())
    write_text_atomic(out / "probes.csv", probes_csv(result))
    save_figure(plot_binned_accuracy(result, figure_locations), out / "fig7_binned_accuracy")
    save_figure(plot_layerwise(result), out / "probes_layerwise")
    best = result.best_location()
    mean, lo, hi = best.stat("test_rounded_acc")
    print(f"probed {len(indices)} location(s) x {len(seeds)} seed(s) on {result.source['rows']} rows; "
          f"best by validation: {best.name} (test rounded accuracy {mean:.3f} [{lo:.3f}, {hi:.3f}])")
    print(f"wrote {out / 'probes.json'}, probes.csv, fig7_binned_accuracy.png/.pdf, probes_layerwise.png/.pdf")
    return 0


def probes_csv(result) -> str:
    """The probes table: one row per location and seed."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["location", "index", "seed", "alpha", "alpha_rel", "val_rounded_acc", "test_rounded_acc",
                     "r2", "mae", "coef_norm", "classifier_test_acc", "classifier_class_norm_max"])
    for loc in result.locations:
        for f in loc.fits:
            clf = [f"{f.classifier['test_acc']:.6f}", f"{f.classifier['class_norm_max']:.6g}"] if f.classifier \
                else ["", ""]
            writer.writerow([loc.name, loc.index, f.seed, f"{f.alpha:.6g}", f"{f.alpha_rel:.6g}",
                             f"{f.val_rounded_acc:.6f}", f"{f.test_rounded_acc:.6f}", f"{f.r2:.6f}",
                             f"{f.mae:.6f}", f"{f.coef_norm:.6g}", *clf])
    return buf.getvalue()


def run_sweep_command(args) -> int:
    from countlens.probes.experiments import (
        DEFAULT_SWEEP_ALPHAS,
        first_block_location,
        load_probe_data,
        parse_alphas,
        resolve_locations,
        run_norm_sweep,
    )
    from countlens.probes.figures import plot_norm_sweep

    _require(args, "acts", "out")
    alphas = parse_alphas(args.alphas or DEFAULT_SWEEP_ALPHAS)
    seeds, fractions = _seeds(args), _split(args.split)
    data = load_probe_data(args.acts)
    if args.location is None:
        index = first_block_location(data.locations)
    else:
        if "," in args.location:
            raise UsageError("--location takes one location; run the sweep once per location")
        index = resolve_locations(data.locations, args.location)[0]
    result = run_norm_sweep(data, index, alphas, seeds, fractions, standardize=args.standardize)
    out = Path(args.out)
    write_json_atomic(out / "sweep.json", result.to_dict())
    save_figure(plot_norm_sweep(result), out / "fig8_norm_sweep")
    stars = ", ".join(f"{s.unregularised_norm:.3g} (acc {s.unregularised_acc:.3f})" for s in result.seeds)
    print(f"swept {len(alphas)} alphas x {len(seeds)} seed(s) at {result.location}; unregularised norms: {stars}")
    print(f"wrote {out / 'sweep.json'}, fig8_norm_sweep.png/.pdf")
    return 0


def run_toy_acts_command(args) -> int:
    from countlens.toy.export import export_toy_activations, toy_params_from_json

    _require(args, "out")
    cfg, params = toy_params_from_json(read_json(args.params, "parameter file"), L=args.L)
    out = export_toy_activations(cfg, params, args.out, L=cfg.L, seed=args.seed, progress=True)
    print(f"wrote toy representations ({cfg.variant}, d={cfg.d}, L={cfg.L}) to {out}")
    return 0


def run_redraw_command(args) -> int:
    from countlens.probes.experiments import NormSweepResult, ProbeResult
    from countlens.probes.figures import plot_binned_accuracy, plot_layerwise, plot_norm_sweep

    data = read_json(args.result, "result file")
    out = Path(args.out) if getattr(args, "out", None) else Path(args.result).parent
    if isinstance(data, dict) and "location_index" in data:
        save_figure(plot_norm_sweep(NormSweepResult.from_dict(data)), out / "fig8_norm_sweep")
        print(f"wrote {out / 'fig8_norm_sweep'}.png/.pdf")
        return 0
    if not isinstance(data, dict) or "locations" not in data:
        raise UsageError(f"{args.result} is neither a probes.json nor a sweep.json")
    result = ProbeResult.from_dict(data)
    names = None
    if getattr(args, "figure_locations", None):
        names = [n.strip() for n in args.figure_locations.split(",") if n.strip()]
        unknown = [n for n in names if n not in [loc.name for loc in result.locations]]
        if unknown:
            raise UsageError(f"--figure-locations {', '.join(unknown)} not in {args.result}")
    save_figure(plot_binned_accuracy(result, names), out / "fig7_binned_accuracy")
    save_figure(plot_layerwise(result), out / "probes_layerwise")
    print(f"wrote {out / 'fig7_binned_accuracy'}.png/.pdf and probes_layerwise.png/.pdf")
    return 0
