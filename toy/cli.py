"""``countlens toy ...``: every toy table, figure and command (definitions: docs/definitions.md §1).

Each handler parses flags into a config of :mod:`countlens.toy.experiments`, runs it, saves the result and
draws its figure; flags left unset take the config's defaults (``--full``: the config's ``paper()`` sizes).
Every option that sets a config field has that field as its ``dest``, so the dispatcher words a config's
error with this command's own flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from countlens.core.args import (
    HelpFormatter,
    Option,
    add_common_options,
    add_config_options,
    config_values,
    positive_int,
    threaded,
)
from countlens.core.cache import ResultCache
from countlens.core.errors import UsageError
from countlens.core.threads import TOY_THREADS
from countlens.toy import experiments as ex
from countlens.toy.model import READOUTS, VARIANTS, ToyConfig
from countlens.toy.train import TrainConfig, TrainingDiverged, train


def _sizes(cls: Any, args: argparse.Namespace) -> Any:
    """The config class itself, or its ``paper`` sizes under ``--full``."""
    return cls.paper if getattr(args, "full", False) else cls


def _cache_beside(target: str | Path | None) -> ResultCache:
    """The resume folder of a result file: ``.NAME.runs`` beside it (none without a file)."""
    if target is None:
        return ResultCache(None)
    target = Path(target)
    return ResultCache(target.parent / f".{target.name}.runs")


def _out_dir(text: str) -> Path:
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; pass a folder")
    return out


# --- handlers --------------------------------------------------------------------------------------------


@threaded
def cmd_construct(args: argparse.Namespace) -> int:
    result = ex.run_construct(ex.ConstructConfig(**config_values(args)))
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


@threaded
def cmd_check(args: argparse.Namespace) -> int:
    result = ex.run_check(ex.CheckConfig(**config_values(args)))
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


@threaded
def cmd_rates(args: argparse.Namespace) -> int:
    result = ex.run_rates(ex.RatesConfig(**config_values(args)), progress=not args.quiet)
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


@threaded
def cmd_lcap(args: argparse.Namespace) -> int:
    result = ex.run_lcap(ex.LcapConfig(**config_values(args)), progress=not args.quiet)
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


@threaded
def cmd_table3(args: argparse.Namespace) -> int:
    make = ex.Table3Config.paper if args.attained_full else ex.Table3Config
    config = make(**config_values(args))
    cache = _cache_beside(args.json)
    result = ex.run_table3(config, progress=not args.quiet, cache=cache, workers=args.workers)
    if args.json:
        result.write(args.json)
    cache.clear()
    print(result.format())
    return 0


@threaded
def cmd_figure1(args: argparse.Namespace) -> int:
    out = Path(args.out)
    result = ex.run_figure1(ex.Figure1Config(**config_values(args)))
    paths = [*result.save(out), *_figures().draw_figure1(result, out)]
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


@threaded
def cmd_train(args: argparse.Namespace) -> int:
    cfg = ToyConfig(**config_values(args, ToyConfig))
    tcfg = TrainConfig(**config_values(args, TrainConfig))
    out = Path(args.json)
    ckpt = Path(args.checkpoint) if args.checkpoint else out.parent / f".{out.name}.ckpt"
    try:
        result = train(cfg, tcfg, checkpoint=ckpt, checkpoint_every=args.checkpoint_every, progress=not args.quiet)
    except TrainingDiverged as exc:
        where = f"; the last checkpoint, {ckpt}, resumes before it" if ckpt.exists() else ""
        print(f"countlens: error: {exc}; nothing written (lower --lr or set --cap){where}", file=sys.stderr)
        return 1
    result.write(out)  # a parameter file: `countlens toy check --params OUT` reads it
    if not args.checkpoint:
        ckpt.unlink(missing_ok=True)
    print(f"{cfg.variant} {cfg.readout} d={cfg.d} L={cfg.L}: {result.steps_run} steps, test exact accuracy "
          f"{result.test_exact_accuracy:.4f}, full-domain worst error {result.full_domain_worst_error:.4g} at "
          f"{tuple(result.worst_pair)} -> {'PASSED' if result.passed else 'failed'}; max norm {result.max_norm:.4g}")
    print(f"wrote {out}")
    return 0


@threaded
def cmd_table2(args: argparse.Namespace) -> int:
    config = _sizes(ex.Table2Config, args)(**config_values(args))
    cache = _cache_beside(args.json)
    result = ex.run_table2(config, progress=not args.quiet, cache=cache, workers=args.workers)
    result.write(args.json)
    cache.clear()
    print(result.format())
    print(f"wrote {args.json}")
    return 0


def _figures() -> Any:
    from countlens.toy import figures  # matplotlib: imported only by the commands that draw

    return figures


def _figure(args: argparse.Namespace, name: str, cls: Any, run: Any) -> int:
    """A figure command: config from the flags, run (resumable in ``OUT/.NAME.runs``), draw, save."""
    draw = getattr(_figures(), f"draw_{name}")
    out = _out_dir(args.out)
    config = _sizes(cls, args)(**config_values(args))
    cache = ResultCache(out / f".{name}.runs")
    result = run(config, progress=not args.quiet, cache=cache)
    paths = draw(result, out)  # drawn first: a plotting failure leaves no result half-written
    saved = result.save(out)
    cache.clear()
    print("wrote " + ", ".join(str(p) for p in [*saved, *paths]))
    return 0


@threaded
def cmd_figure2(args: argparse.Namespace) -> int:
    return _figure(args, "figure2", ex.Figure2Config, ex.run_figure2)


@threaded
def cmd_figure3(args: argparse.Namespace) -> int:
    return _figure(args, "figure3", ex.Figure3Config, ex.run_figure3)


@threaded
def cmd_figure4(args: argparse.Namespace) -> int:
    return _figure(args, "figure4", ex.Figure4Config, ex.run_figure4)


# --- parsers ---------------------------------------------------------------------------------------------
# Each command's options are its config's fields (add_config_options: flag, type, choices, help and shown
# default from the field); a command adds only what is no field: where to write, --full, workers, threads.

# What the toy's commands say of a field beyond its config: choices a config checks in its own code.
_OPTIONS = {"variant": Option("variant", choices=VARIANTS), "readout": Option("readout", choices=READOUTS)}


def _parser(sub: Any, name: str, help: str, description: str, func: Any, config: Any = None,
            names: Any = None, **given: Any) -> argparse.ArgumentParser:
    """A toy command whose options are the fields ``names`` of ``config`` (each left unset unless given,
    so ``--full`` sizes apply)."""
    p = sub.add_parser(name, help=help, description=description, formatter_class=HelpFormatter)
    p.set_defaults(func=func)
    if config is not None:
        add_config_options(p, config, names, unset=True, **{"options": _OPTIONS, **given})
    return p


def _add(p: Any, *names: str, what: str = "", no_file: str = "print only") -> None:
    """The options no config holds: ``json`` (write ``what`` there), ``json_out`` (the output JSON),
    ``out`` (the output folder), ``full``, ``workers`` (processes training ``what``), ``threads``, ``quiet``."""
    for name in names:
        spec = {"json": ("--json", {"help": f"write {what} here (default: {no_file})"}),
                "json_out": ("--json", {"dest": "json", "required": True, "help": "output JSON"}),
                "out": ("--out", {"required": True, "help": f"output folder ({what})"}),
                "full": ("--full", {"action": "store_true", "help": "the paper's sizes (long: see BENCHMARKS.md)"}),
                "workers": ("--workers", {"type": positive_int, "default": 1, "help": f"processes training {what} "
                            "side by side, one torch thread each (the table is the same with any number)"}),
                }.get(name)
        if spec is None:
            add_common_options(p, name, **({"threads": TOY_THREADS} if name == "threads" else {}))
        else:
            p.add_argument(spec[0], **spec[1])


def _add_theory(sub: Any) -> None:
    p = _parser(sub, "construct", "explicit parameters that count on the full domain, checked",
                "Build the smallest-norm construction found for one variant at (d, L) and check it on every pair\n"
                "n + m <= L. The JSON is a parameter file for `countlens toy check --params`, `probe toy` and\n"
                "`compare --toy`.", cmd_construct, ex.ConstructConfig, options={})
    _add(p, "json", "threads", what="the parameters and their check")

    p = _parser(sub, "check", "full-domain check of a parameter file",
                "Check rounding-exact counting of a parameter file on every pair n + m <= L; report the worst\n"
                "pair and its error.", cmd_check, ex.CheckConfig)
    _add(p, "json", "threads", what="the check result")

    p = _parser(sub, "rates", "B_min(L) per variant and log-log slopes (Table 1)",
                "Table 1, measured: the largest per-vector norm of each variant's checked construction on a\n"
                "grid of L, the slope of log B_min against log L, and the claimed exponent beside it.", cmd_rates,
                ex.RatesConfig)
    _add(p, "json", "threads", "quiet", what="the rates")

    p = _parser(sub, "lcap", "L_cap(d) of softmax-preln-bare, with the bound that makes it finite",
                "Table 1's L_cap(d) of bare pre-LN, bracketed: the longest verified construction and the\n"
                "shortest length no parameters of any norm can count, with the reason in words.", cmd_lcap,
                ex.LcapConfig)
    _add(p, "json", "threads", "quiet", what="the result")

    p = _parser(sub, "table3", "Table 3: L_max(B), constructed and (with --attained) trained under the cap",
                "Table 3: the longest length each construction counts at per-vector cap B (checked), beside\n"
                "the paper's values at d = 16; with --attained also the longest grid length that training\n"
                "under the cap passes (a lower bound: the grid ends at its last length). Each finished cell\n"
                "is kept beside --json, so an interrupted run resumes.", cmd_table3, ex.Table3Config,
                ("d", "B", "tau"))
    _add(p, "json", what="the table", no_file="print only; no resume")
    g = p.add_argument_group("attained column (training under the cap)")
    add_config_options(g, ex.Table3Config, [f.name for f in dataclasses.fields(ex.Table3Config)
                                            if f.name.startswith("attained")],
                       unset=True, alternate=("--attained-full", ex.Table3Config.paper()))
    g.add_argument("--attained-full", action="store_true", help="the paper's grid (to 10,000), seeds and steps")
    _add(g, "workers", what="the variants' attained columns")
    _add(p, "threads", "quiet")

    p = _parser(sub, "figure1", "Figure 1: boundary representations h(n, 0), four panels",
                "Figure 1: h(n, 0) for n = 0..L of the checked constructions of linear, softmax, post-LN and\n"
                "bare pre-LN (at min(L, L_cap(d))), each in the plane that best holds its points.", cmd_figure1,
                ex.Figure1Config)
    _add(p, "out", "threads", what="figure1.png, figure1.pdf, figure1.json")


def _add_train(sub: Any) -> None:
    p = _parser(sub, "train", "train the toy model from random initialisation",
                "Train one toy model and write final metrics, the log and the parameters (readable by\n"
                "`countlens toy check --params`). A checkpoint is saved as it goes; an existing one resumes.",
                cmd_train, ToyConfig, ("variant", "readout", "d", "L", "tau"),
                options={**_OPTIONS, "d": Option("d", required=False, default=16)})
    add_config_options(p, TrainConfig, [f.name for f in dataclasses.fields(TrainConfig) if f.name != "history_size"],
                       unset=True)
    p.add_argument("--checkpoint", default=None, help="checkpoint file (default: hidden file beside --json, "
                                                      "removed after success); an existing one is resumed")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints (0: only at the end)")
    _add(p, "json_out", "threads", "quiet")

    p = _parser(sub, "table2", "Table 2: trained softmax (no LN), exact accuracy and worst error",
                "Table 2: train softmax without LN at each d and L for each seed; report test exact accuracy\n"
                "and full-domain worst error, mean [min, max] over seeds. Finished runs are kept beside\n"
                "--json, so an interrupted run resumes.", cmd_table2, ex.Table2Config,
                ("d", "L", "seeds", "steps", "optimizer", "lr"), alternate=("--full", ex.Table2Config.paper()))
    _add(p, "full", "json_out", "threads", "quiet", "workers", what="the runs")


def _add_figures(sub: Any) -> None:
    for name, cls, func, help, description in (
            ("figure2", ex.Figure2Config, cmd_figure2, "Figure 2: regression vs classification read-out costs",
             "Figure 2: both read-outs trained by L-BFGS at each L (panels a-c, beside the classifier\n"
             "construction) and L_max under caps B (panel d: Table 3's attained and constructed columns).\n"
             "Finished runs are kept in OUT/.figure2.runs until the figure is written."),
            ("figure3", ex.Figure3Config, cmd_figure3, "Figure 3: training dynamics of softmax, 3 seeds",
             "Figure 3: L-BFGS training of the regression model per seed: held-out exact accuracy, the\n"
             "parameter and score scales normalised by the theory's rates, and the high/low spacing ratio."),
            ("figure4", ex.Figure4Config, cmd_figure4, "Figure 4: mini-batch vs full-batch Adam",
             "Figure 4: full-batch Adam vs mini-batch Adam from the same initialisation and split. The\n"
             "mini-batch run takes more updates, as in the paper: each update sees one batch, not the\n"
             "whole training split.")):
        p = _parser(sub, name, help, description, func, cls, ("variant", "d", *(
            f.name for f in dataclasses.fields(cls) if f.name not in ("variant", "d", "attained"))),
            alternate=("--full", cls.paper()))
        _add(p, "out", "full", "threads", "quiet", what=f"{name}.json, {name}.png, {name}.pdf")


def register(subparsers: Any) -> None:
    """Add ``countlens toy`` and its subcommands."""
    toy = subparsers.add_parser(
        "toy", help="the toy theory: constructions, full-domain checks, norm budgets, training",
        formatter_class=HelpFormatter,
        description="The toy theory: one attention layer counting up to L, exactly and checkably.\n"
                    "Tables 1-3 and Figures 1-4; every command has reduced default sizes and, where it\n"
                    "trains, --full for the paper's.")
    sub = toy.add_subparsers(dest="toy_command", metavar="SUBCOMMAND", parser_class=type(toy))
    sub.required = True
    _add_theory(sub)
    _add_train(sub)
    _add_figures(sub)
