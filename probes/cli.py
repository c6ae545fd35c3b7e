"""``countlens probe``: validation-selected ridge probes per location (``probes.json``, Figure 7, layerwise
plot; with ``--target running_count`` the probes at every item of an items capture, ``running_count.json``,
Figure 10); ``countlens probe sweep`` (Figure 8); ``countlens probe toy-acts`` (toy representations as a capture);
``countlens probe redraw`` (figures from a finished run's JSON). Parse → config → run → write.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from countlens.core.args import (
    HelpFormatter,
    Option,
    add_common_options,
    add_config_options,
    config_values,
    numbers_text,
    parse_float_list,
    threaded,
)
from countlens.core.errors import ConfigError, UsageError, about, literal
from countlens.core.fields import AtLeast, Optional, check_fields, field_doc
from countlens.core.io import read_json

_RUN_DESCRIPTION = """\
Fit ridge probes of the count on the boundary vector at every location: the whole alpha grid from one
decomposition per location and split seed, alpha chosen on the validation split, the chosen probe scored
(rounded exact accuracy) on the IID test split. Writes probes.json, probes.csv,
fig7_binned_accuracy.png/.pdf and probes_layerwise.png/.pdf.

With --target running_count, on an items capture (`countlens llm capture --positions items`): the same
probes at every item, split by prompt, per location and relative position in the list (--position-buckets),
of the running count and of the final count n; writes running_count.json, running_count.csv and
fig10_running_count.png/.pdf.

Subcommands: sweep (Figure 8), toy-acts (toy representations as an activation folder), redraw."""

_USAGE = ("%(prog)s --acts DIR --out DIR [options]\n"
          "       %(prog)s {sweep,toy-acts,redraw} ... (see %(prog)s SUBCOMMAND --help)")


def _grid_text(grid) -> str:
    lo, hi, count = grid
    return f"{lo:.0e}:{hi:.0e}:{count}".replace("e-0", "e-").replace("e+0", "e")


def _alphas(text: str | None, default) -> tuple[float, ...]:
    """``lo:hi:count`` (log grid, ends included) or a comma list; the values are checked by the config."""
    if text is None:
        return tuple(default)
    text = str(text).strip()
    if ":" not in text:
        return tuple(parse_float_list(text, "alphas"))
    try:
        lo, hi, k = text.split(":")
        lo, hi, k = float(lo), float(hi), int(k)
    except ValueError:
        raise ConfigError("alphas", "{alphas} must be lo:hi:count (log grid) or a comma list, got "
                                    + literal(repr(text))) from None
    if not (lo > 0 and hi > 0 and k >= 1):
        raise ConfigError("alphas", "{alphas} " + literal(repr(text)) + ": a log grid lo:hi:count needs lo, hi > 0 "
                                    "and count >= 1 (add 0 with a comma list like 0,1e-3,1)")
    return tuple(np.logspace(np.log10(lo), np.log10(hi), k).tolist())


def _probe_options(grid, values) -> dict[str, Option]:
    """How ``probe`` writes the settings whose text is its own: the α grid as ``lo:hi:count`` (``grid``, whose
    values are ``values``), the split as ``--split``; with the rules both probe configs check them by
    (:data:`~countlens.probes.probe.COMMON_FIELDS`)."""
    from countlens.probes.probe import COMMON_FIELDS

    return {"alphas": Option("alphas", parse=lambda text, field: _alphas(text, ()), rule=COMMON_FIELDS["alphas"],
                             text=lambda v: _grid_text(grid) if tuple(v) == tuple(values) else numbers_text(v)),
            "seeds": Option("seeds", rule=COMMON_FIELDS["seeds"]),
            "fractions": Option("fractions", alias="--split", text=numbers_text, rule=COMMON_FIELDS["fractions"],
                                parse=lambda text, field: tuple(parse_float_list(text, field)))}


# How the probe commands word what their configs leave undocumented or say otherwise.
_STANDARDIZE = Option("standardize", alias="--no-standardize",
                      help="fit on raw activations instead of per-dimension z-scores (default: standardise)")
_BLAS_HELP = ("BLAS threads for each location's decompositions, 0 = the process default (BENCHMARKS.md measures "
              "why one)")
_CLASSIFIER_C = Option("classifier_C", default=(1.0,), help="inverse L2 strength of that classifier, or a comma "
                                                            "list chosen on validation accuracy")
_LOCATION = Option("location", help="name or index (default: the output of the first block; 'h' for the toy)")


def register(subparsers) -> None:
    """Add ``probe`` and its subcommands ``sweep``, ``toy-acts`` and ``redraw`` to ``subparsers``."""
    from countlens.probes.ridge import DEFAULT_ALPHA_GRID
    from countlens.probes.sweep import DEFAULT_SWEEP_ALPHA_GRID

    grids = textwrap.fill(f"The two default grids differ on purpose: the probes choose alpha on validation over "
             f"{_grid_text(DEFAULT_ALPHA_GRID)} ({DEFAULT_ALPHA_GRID[2]} values; stronger penalties are never "
             f"selected), the sweep draws the whole trade-off over {_grid_text(DEFAULT_SWEEP_ALPHA_GRID)} "
             f"({DEFAULT_SWEEP_ALPHA_GRID[2]} values), down to probes shrunk to almost zero norm.", 100)
    parser = _probe_parser(subparsers, grids)
    sub = parser.add_subparsers(dest="probe_command", metavar="{sweep,toy-acts,redraw}",
                                parser_class=type(parser))
    _sweep_parser(sub, parser.prog, grids)
    _toy_acts_parser(sub, parser.prog)
    _redraw_parser(sub, parser.prog)


def _probe_parser(subparsers, grids: str) -> argparse.ArgumentParser:
    """``countlens probe``: its inputs, then its options derived from :class:`ProbeConfig`'s fields, left
    ``None`` unless given (so that ``probe --seeds 0 sweep ...`` reaches the sweep)."""
    from countlens.probes.probe import ProbeConfig
    from countlens.probes.ridge import DEFAULT_ALPHA_GRID, DEFAULT_ALPHAS

    parser = subparsers.add_parser("probe", help="ridge probes of the count per location, and of the count at every item (Figures 7, 8 and 10)",
                                   description=f"{_RUN_DESCRIPTION}\n\n{grids}", usage=_USAGE,
                                   formatter_class=HelpFormatter)
    # Shared flags use SUPPRESS in the subcommands so `probe --acts X sweep ...` keeps X.
    required = parser.add_argument_group("required")
    required.add_argument("--acts", metavar="DIR",
                          help="activation folder (from `countlens llm capture` or `probe toy-acts`; required)")
    required.add_argument("--out", metavar="DIR", help="output folder (required)")
    options = {**_probe_options(DEFAULT_ALPHA_GRID, DEFAULT_ALPHAS), "standardize": _STANDARDIZE}
    add_config_options(parser, ProbeConfig, ("locations", "alphas", "seeds", "fractions", "standardize"),
                       options=options, unset=True)
    parser.add_argument("--classifier", action="store_true",  # no field: it turns --classifier-C's value on
                        help="also fit the multinomial logistic read-out over counts (slower: one fit per "
                             "location and seed; default: off)")
    add_config_options(parser, ProbeConfig, ("classifier_C", "figure_locations", "blas_threads", "target",
                                             "position_buckets"),
                       options={"classifier_C": _CLASSIFIER_C}, unset=True, helps={"blas_threads": _BLAS_HELP})
    add_common_options(parser, "quiet")
    parser.set_defaults(func=cmd_probe)
    return parser


def _sweep_parser(sub, prog: str, grids: str) -> None:
    """``countlens probe sweep``: the options of :class:`SweepConfig`'s fields, worded as ``probe``'s (the
    same settings); those ``probe`` has too keep a value given before ``sweep`` unless given again."""
    from countlens.probes.probe import ProbeConfig
    from countlens.probes.sweep import DEFAULT_SWEEP_ALPHA_GRID, DEFAULT_SWEEP_ALPHAS, SweepConfig

    sweep = sub.add_parser("sweep", help="Figure 8: native probe norm vs held-out accuracy along the alpha grid",
                           formatter_class=HelpFormatter, prog=f"{prog} sweep",
                           description=textwrap.fill(
                               "Fit one probe per alpha (and the unregularised one) at one location for each "
                               "split seed and score every one on the test split (no selection); writes "
                               "sweep.json and fig8_norm_sweep.png/.pdf.", 100) + "\n\n" + grids)
    sweep.add_argument("--acts", default=argparse.SUPPRESS, metavar="DIR", help="activation folder (required)")
    _add_out(sweep, "output folder (required)")
    shared = ("alphas", "seeds", "fractions", "standardize")
    options = {**_probe_options(DEFAULT_SWEEP_ALPHA_GRID, DEFAULT_SWEEP_ALPHAS), "standardize": _STANDARDIZE,
               "location": _LOCATION}
    helps = {**{name: field_doc(ProbeConfig, name) for name in shared if field_doc(ProbeConfig, name)},
             "blas_threads": _BLAS_HELP}
    add_config_options(sweep, SweepConfig, ("location", *shared, "blas_threads"), options=options, helps=helps,
                       inherit=True)
    sweep.set_defaults(func=cmd_sweep)


@dataclass(frozen=True)
class ToyActsConfig:
    """``countlens probe toy-acts``: the toy parameter file whose boundary representations are written, the
    domain ``n + m <= L`` they are written on and the seed column's value."""

    params: str
    """toy parameter JSON (required)"""
    L: int | None = None
    """maximum length (default: the file's L)"""
    seed: int = 0
    """value of the seed column"""

    FIELDS: ClassVar[dict] = {"L": Optional(AtLeast(1))}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS, assign=True)


@dataclass(frozen=True)
class RedrawConfig:
    """``countlens probe redraw``: the finished run's JSON and, for Figure 7, the locations to draw (names;
    ``None``: those of the run)."""

    result: str
    """probes.json, sweep.json or running_count.json (required)"""
    figure_locations: tuple[str, ...] | None = None
    """locations drawn in Figure 7, names comma-separated (default: those of the run)"""


def _toy_acts_parser(sub, prog: str) -> None:
    """``countlens probe toy-acts``: the options of :class:`ToyActsConfig`'s fields and an output folder."""
    toy = sub.add_parser("toy-acts", help="write the toy's boundary representations as an activation folder",
                         formatter_class=HelpFormatter, prog=f"{prog} toy-acts",
                         description="Evaluate toy parameters (from `countlens toy construct` or `toy train`) "
                                     "on every pair n + m <= L and write attn_out and h per pair in the "
                                     "capture format, so probe and geometry commands run on the toy.")
    add_config_options(toy, ToyActsConfig, ("params",))
    _add_out(toy, "output folder (required)")
    add_config_options(toy, ToyActsConfig, ("L", "seed"))
    add_common_options(toy, "quiet", quiet=argparse.SUPPRESS)
    add_common_options(toy, "threads", threads=None)
    toy.set_defaults(func=cmd_toy_acts)


def _redraw_parser(sub, prog: str) -> None:
    """``countlens probe redraw``: the options of :class:`RedrawConfig`'s fields (``--figure-locations``
    given to ``probe`` before ``redraw`` kept) and an output folder."""
    redraw = sub.add_parser("redraw", help="redraw Figures 7/8/10 from probes.json, sweep.json or running_count.json, "
                                           "without refitting",
                            formatter_class=HelpFormatter, prog=f"{prog} redraw",
                            description="Redraw the figures of a finished run from its JSON.")
    add_config_options(redraw, RedrawConfig, ("result",))
    add_config_options(redraw, RedrawConfig, ("figure_locations",), inherit=True)
    _add_out(redraw, "output folder (default: beside the JSON)")
    redraw.set_defaults(func=cmd_redraw)


def _add_out(parser: argparse.ArgumentParser, help: str) -> None:
    """A subcommand's output folder; one given to ``probe`` before the subcommand is kept."""
    parser.add_argument("--out", default=argparse.SUPPRESS, metavar="DIR", help=help)


def _require(args, *names: str) -> None:
    for name in names:
        if getattr(args, name, None) in (None, ""):
            raise UsageError(f"--{name} is required")


def cmd_probe(args) -> int:
    from countlens.probes.figures import draw_probes
    from countlens.probes.probe import ProbeConfig, run_probes

    _require(args, "acts", "out")
    values = config_values(args)
    if values.get("blas_threads") == 0:  # the process's own count
        values["blas_threads"] = None
    if not args.classifier:  # --classifier-C sets the classifier's C, --classifier turns it on
        values.pop("classifier_C", None)
    config = ProbeConfig(acts=args.acts, **values)
    out = Path(args.out)
    if config.target == "running_count":
        return _running_count(config, out, progress=not args.quiet)
    result = run_probes(config, resume_dir=out / "partial", progress=not args.quiet)
    result.save(out)
    draw_probes(result, out)
    print(result.summary())
    print(f"wrote {out / 'probes.json'}, probes.csv, fig7_binned_accuracy.png/.pdf, probes_layerwise.png/.pdf")
    return 0


def _running_count(config, out: Path, progress: bool) -> int:
    from countlens.probes.figures import draw_running_count
    from countlens.probes.running import run_running_count

    result = run_running_count(config, resume_dir=out / "partial-running", progress=progress)
    result.save(out)
    draw_running_count(result, out)
    print(result.summary())
    print(f"wrote {out / 'running_count.json'}, running_count.csv, fig10_running_count.png/.pdf")
    return 0


def cmd_sweep(args) -> int:
    from countlens.probes.figures import draw_sweep
    from countlens.probes.sweep import SweepConfig, run_sweep

    _require(args, "acts", "out")
    values = config_values(args)  # with those given to `probe` before `sweep`
    if values.get("blas_threads") == 0:  # the process's own count
        values["blas_threads"] = None
    config = SweepConfig(acts=args.acts, **values)
    result = run_sweep(config)
    out = Path(args.out)
    result.save(out)
    draw_sweep(result, out)
    print(result.summary())
    print(f"wrote {out / 'sweep.json'}, fig8_norm_sweep.png/.pdf")
    return 0


@threaded
def cmd_toy_acts(args) -> int:
    from countlens.toy import export_toy_activations, read_params

    _require(args, "out")
    config = ToyActsConfig(**config_values(args))
    with about("params"):
        file = read_params(read_json(config.params, "parameter file"), L=config.L)
    cfg = file.cfg
    out = export_toy_activations(cfg, file.params, args.out, L=cfg.L, seed=config.seed, progress=not args.quiet)
    print(f"wrote toy representations ({cfg.variant}, d={cfg.d}, L={cfg.L}) to {out}")
    return 0


def cmd_redraw(args) -> int:
    from countlens.probes.figures import draw_probes, draw_sweep
    from countlens.probes.probe import ProbeResult
    from countlens.probes.sweep import SweepResult

    config = RedrawConfig(**config_values(args))
    with about("result"):
        data = read_json(config.result, "result file")
    out = Path(args.out) if getattr(args, "out", None) else Path(config.result).parent
    if isinstance(data, dict) and "location_index" in data:
        draw_sweep(SweepResult.from_dict(data), out)
        print(f"wrote {out / 'fig8_norm_sweep'}.png/.pdf")
        return 0
    if isinstance(data, dict) and "buckets" in data:
        from countlens.probes.figures import draw_running_count
        from countlens.probes.running import RunningCountResult

        draw_running_count(RunningCountResult.from_dict(data), out)
        print(f"wrote {out / 'fig10_running_count'}.png/.pdf")
        return 0
    if not isinstance(data, dict) or "locations" not in data:
        raise UsageError(f"{config.result} is neither a probes.json, a running_count.json nor a sweep.json")
    result = ProbeResult.from_dict(data)
    names = list(config.figure_locations) if config.figure_locations else None
    unknown = [n for n in names or () if n not in [loc.name for loc in result.locations]]
    if unknown:
        raise ConfigError("figure_locations", f"{{figure_locations}} {literal(', '.join(unknown))} not in "
                                              f"{literal(config.result)}")
    draw_probes(result, out, names)
    print(f"wrote {out / 'fig7_binned_accuracy'}.png/.pdf and probes_layerwise.png/.pdf")
    return 0
