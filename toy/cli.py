"""``countlens toy ...``: every toy table, figure and command (definitions: docs/definitions.md §1).

Each handler parses flags into a config of :mod:`countlens.toy.experiments`, runs it, saves the result and
draws its figure; flags left unset take the config's defaults (``--full``: the config's ``paper()`` sizes).
Every option that sets a config field has that field as its ``dest``, so the dispatcher words a config's
error with this command's own flag.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from countlens.core.args import (
    HelpFormatter,
    add_common_options,
    parse_float_list,
    parse_int_list,
    positive_int,
)
from countlens.core.cache import ResultCache
from countlens.core.errors import UsageError
from countlens.core.fields import AtLeast
from countlens.core.threads import TOY_THREADS, blas_threads, torch_threads
from countlens.toy import experiments as ex
from countlens.toy.domain_loss import LOSSES
from countlens.toy.model import READOUTS, VARIANTS, ToyConfig
from countlens.toy.train import OPTIMIZERS, PARAMETRIZATIONS, TrainConfig, TrainingDiverged, train


def _config(make: Any, **given: Any) -> Any:
    """``make(**given)`` without the unset (``None``) values (those take the config's defaults)."""
    return make(**{k: v for k, v in given.items() if v is not None})


def _sizes(cls: Any, args: argparse.Namespace) -> Any:
    """The config class itself, or its ``paper`` sizes under ``--full``."""
    return cls.paper if getattr(args, "full", False) else cls


def _ints(text: str | None, field: str) -> tuple[int, ...] | None:
    return None if text is None else tuple(parse_int_list(text, field))


def _floats(text: str | None, field: str) -> tuple[float, ...] | None:
    return None if text is None else tuple(parse_float_list(text, field))


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return str(value)


def _default(cls: Any, name: str, full_flag: str | None = "--full") -> str:
    """A config field's default as help text, with its ``paper()`` value (under ``full_flag``) if that differs."""
    quick = _shown(getattr(cls(), name))
    full = _shown(getattr(cls.paper(), name)) if full_flag else quick
    return f"(default: {quick}; {full_flag}: {full})" if full != quick else f"(default: {quick})"


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


def _with_threads(func: Any) -> Any:
    """Run a command with ``--threads`` torch intra-op and BLAS threads (default
    :data:`countlens.core.threads.TOY_THREADS`), restoring the previous counts: the toy's tensors are small, so a
    second thread costs more in contention than it gains (BENCHMARKS.md)."""
    @functools.wraps(func)
    def run(args: argparse.Namespace) -> Any:
        AtLeast(1)(args.threads, "threads")  # the check a config makes of its own threads (LensConfig's)
        with torch_threads(args.threads), blas_threads(args.threads):
            return func(args)

    return run


def _names(text: str | None) -> tuple[str, ...] | None:
    """A comma-separated list of names (the config checks them)."""
    return None if not text else tuple(v.strip() for v in text.split(",") if v.strip())


# --- handlers --------------------------------------------------------------------------------------------


def cmd_construct(args: argparse.Namespace) -> int:
    config = _config(ex.ConstructConfig, variant=args.variant, d=args.d, L=args.L, tau=args.tau)
    result = ex.run_construct(config)
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    result = ex.run_check(_config(ex.CheckConfig, params=args.params, L=args.L))
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


def cmd_rates(args: argparse.Namespace) -> int:
    config = _config(ex.RatesConfig, d=args.d, L=_ints(args.L, "L"), variants=_names(args.variants),
                     tau=args.tau)
    result = ex.run_rates(config, progress=not args.quiet)
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


def cmd_lcap(args: argparse.Namespace) -> int:
    result = ex.run_lcap(_config(ex.LcapConfig, d=_ints(args.d, "d"), tau=args.tau), progress=not args.quiet)
    if args.json:
        result.write(args.json)
    print(result.format())
    return 0


@_with_threads
def cmd_table3(args: argparse.Namespace) -> int:
    make = ex.Table3Config.paper if args.attained_full else ex.Table3Config
    config = _config(make, d=args.d, B=_floats(args.B, "B"), tau=args.tau, attained=args.attained,
                     attained_grid=_ints(args.attained_grid, "attained_grid"),
                     attained_seeds=_ints(args.attained_seeds, "attained_seeds"), attained_steps=args.attained_steps,
                     attained_loss=_names(args.attained_loss),
                     attained_parametrization=_names(args.attained_parametrization),
                     attained_working_set=args.attained_working_set,
                     attained_check_every=args.attained_check_every, attained_patience=args.attained_patience)
    cache = _cache_beside(args.json)
    result = ex.run_table3(config, progress=not args.quiet, cache=cache, workers=args.workers)
    if args.json:
        result.write(args.json)
    cache.clear()
    print(result.format())
    return 0


def cmd_figure1(args: argparse.Namespace) -> int:
    config = _config(ex.Figure1Config, d=args.d, L=args.L)
    out = Path(args.out)
    result = ex.run_figure1(config)
    paths = [*result.save(out), *_figures().draw_figure1(result, out)]
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


@_with_threads
def cmd_train(args: argparse.Namespace) -> int:
    cfg = _config(ToyConfig, variant=args.variant, d=args.d, L=args.L, readout=args.readout, tau=args.tau)
    tcfg = _config(TrainConfig, optimizer=args.optimizer, steps=args.steps, seed=args.seed, cap=args.cap, lr=args.lr,
                   batch_size=args.batch_size, test_fraction=args.test_fraction, log_every=args.log_every,
                   stop_when_passed=args.stop_when_passed, init_scale=args.init_scale, ce_scale=args.ce_scale,
                   loss=args.loss, beta=args.beta, working_set=args.working_set, grow=args.grow,
                   parametrization=args.parametrization, patience=args.patience)
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


@_with_threads
def cmd_table2(args: argparse.Namespace) -> int:
    config = _config(_sizes(ex.Table2Config, args), d=_ints(args.d, "d"), L=_ints(args.L, "L"),
                     seeds=_ints(args.seeds, "seeds"), steps=args.steps, optimizer=args.optimizer, lr=args.lr)
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


def _figure(args: argparse.Namespace, name: str, cls: Any, run: Any, **given: Any) -> int:
    """A figure command: config from the flags, run (resumable in ``OUT/.NAME.runs``), draw, save."""
    draw = getattr(_figures(), f"draw_{name}")
    out = _out_dir(args.out)
    config = _config(_sizes(cls, args), d=args.d, variant=args.variant, **given)
    cache = ResultCache(out / f".{name}.runs")
    result = run(config, progress=not args.quiet, cache=cache)
    paths = draw(result, out)  # drawn first: a plotting failure leaves no result half-written
    saved = result.save(out)
    cache.clear()
    print("wrote " + ", ".join(str(p) for p in [*saved, *paths]))
    return 0


@_with_threads
def cmd_figure2(args: argparse.Namespace) -> int:
    return _figure(args, "figure2", ex.Figure2Config, ex.run_figure2,
                   L=_ints(args.L, "L"), seeds=_ints(args.seeds, "seeds"), steps=args.steps,
                   B=_floats(args.B, "B"), ce_scale=args.ce_scale, lr=args.lr, table3=args.table3)


@_with_threads
def cmd_figure3(args: argparse.Namespace) -> int:
    return _figure(args, "figure3", ex.Figure3Config, ex.run_figure3,
                   L=args.L, seeds=_ints(args.seeds, "seeds"), steps=args.steps, lr=args.lr)


@_with_threads
def cmd_figure4(args: argparse.Namespace) -> int:
    return _figure(args, "figure4", ex.Figure4Config, ex.run_figure4,
                   L=args.L, steps=args.steps, minibatch_steps=args.minibatch_steps, batch_size=args.batch_size,
                   lr=args.lr, seed=args.seed)


# --- parsers ---------------------------------------------------------------------------------------------

_VARIANT_LIST = ", ".join(VARIANTS)


def _parser(sub: Any, name: str, help: str, description: str, func: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=description, formatter_class=HelpFormatter)
    p.set_defaults(func=func)
    return p


def _add_workers(p, what: str) -> None:
    p.add_argument("--workers", type=positive_int, default=1,
                   help=f"processes training {what} side by side, one torch thread each (the table is the same "
                        "with any number)")


def _add_threads(p: argparse.ArgumentParser) -> None:
    add_common_options(p, "threads", threads=TOY_THREADS)


def _add_tau_json(p: argparse.ArgumentParser, what: str, tau_help: str = "score scale (default: 1/sqrt(d))",
                  no_file: str = "print only") -> None:
    p.add_argument("--tau", type=float, default=None, help=tau_help)
    p.add_argument("--json", help=f"write {what} here (default: {no_file})")


def _add_theory(sub: Any) -> None:
    p = _parser(sub, "construct", "explicit parameters that count on the full domain, checked",
                "Build the smallest-norm construction found for one variant at (d, L) and check it on every pair\n"
                "n + m <= L. The JSON is a parameter file for `countlens toy check --params`, `probe toy` and\n"
                "`compare --toy`.", cmd_construct)
    p.add_argument("--variant", required=True, help=f"one of the seven variants: {_VARIANT_LIST}")
    p.add_argument("--d", type=int, required=True, help="model dimension")
    p.add_argument("--L", type=int, required=True, help="maximum length: the domain is n, m >= 0, n + m <= L")
    _add_tau_json(p, "the parameters and their check")

    p = _parser(sub, "check", "full-domain check of a parameter file",
                "Check rounding-exact counting of a parameter file on every pair n + m <= L; report the worst\n"
                "pair and its error.", cmd_check)
    p.add_argument("--params", required=True, help="JSON parameter file (as written by construct or train)")
    p.add_argument("--L", type=int, required=True, help="maximum length to check")
    p.add_argument("--json", help="write the check result here (default: print only)")

    p = _parser(sub, "rates", "B_min(L) per variant and log-log slopes (Table 1)",
                "Table 1, measured: the largest per-vector norm of each variant's checked construction on a\n"
                "grid of L, the slope of log B_min against log L, and the claimed exponent beside it.", cmd_rates)
    p.add_argument("--d", type=int, default=ex.RatesConfig.d, help="model dimension")
    p.add_argument("--L", default=None, help=f"comma-separated lengths {_default(ex.RatesConfig, 'L', None)}; "
                                             f"the report uses {_shown(ex.RATES_L_REPORT)}")
    p.add_argument("--variants", default=None, help="comma-separated variants (default: all seven)")
    _add_tau_json(p, "the rates")
    add_common_options(p, "quiet")

    p = _parser(sub, "lcap", "L_cap(d) of softmax-preln-bare, with the bound that makes it finite",
                "Table 1's L_cap(d) of bare pre-LN, bracketed: the longest verified construction and the\n"
                "shortest length no parameters of any norm can count, with the reason in words.", cmd_lcap)
    p.add_argument("--d", default=None, help=f"comma-separated dimensions {_default(ex.LcapConfig, 'd', None)}")
    _add_tau_json(p, "the result", tau_help="score scale (default: 1/sqrt(d) per d)")
    add_common_options(p, "quiet")

    p = _parser(sub, "table3", "Table 3: L_max(B), constructed and (with --attained) trained under the cap",
                "Table 3: the longest length each construction counts at per-vector cap B (checked), beside\n"
                "the paper's values at d = 16; with --attained also the longest grid length that training\n"
                "under the cap passes (a lower bound: the grid ends at its last length). Each finished cell\n"
                "is kept beside --json, so an interrupted run resumes.", cmd_table3)
    p.add_argument("--d", type=int, default=ex.Table3Config.d, help="model dimension")
    p.add_argument("--B", default=None, help=f"comma-separated caps {_default(ex.Table3Config, 'B', None)}")
    _add_tau_json(p, "the table", no_file="print only; no resume")
    g = p.add_argument_group("attained column (training under the cap)")
    g.add_argument("--attained", action="store_true", help="also train under each cap B and report the largest "
                                                           "grid length that passes (a lower bound on L_max)")
    g.add_argument("--attained-grid", default=None,
                   help=f"lengths to climb {_default(ex.Table3Config, 'attained_grid', '--attained-full')}")
    g.add_argument("--attained-seeds", default=None,
                   help=f"seeds tried per length {_default(ex.Table3Config, 'attained_seeds', '--attained-full')}")
    g.add_argument("--attained-steps", type=int, default=None,
                   help=f"L-BFGS steps per run {_default(ex.Table3Config, 'attained_steps', '--attained-full')}")
    g.add_argument("--attained-full", action="store_true", help="the paper's grid (to 10,000), seeds and steps")
    g.add_argument("--attained-loss", default=None,
                   help=f"comma-separated losses tried in turn per length (of {', '.join(LOSSES)}; max: smooth max error) "
                        f"{_default(ex.Table3Config, 'attained_loss', None)}")
    g.add_argument("--attained-parametrization", default=None,
                   help=f"comma-separated parametrizations tried in turn per length and seed (of "
                        f"{', '.join(PARAMETRIZATIONS)}; polar: each vector's log norm and direction) "
                        f"{_default(ex.Table3Config, 'attained_parametrization', None)}")
    g.add_argument("--attained-working-set", type=int, default=None,
                   help="random pairs in the initial working set, besides the domain's edges "
                        f"{_default(ex.Table3Config, 'attained_working_set', None)}")
    g.add_argument("--attained-check-every", type=int, default=None,
                   help="L-BFGS steps between full-domain checks (the working set grows after each failed one) "
                        f"{_default(ex.Table3Config, 'attained_check_every', None)}")
    g.add_argument("--attained-patience", type=int, default=None,
                   help="stop a run after this many checks in a row without lowering its best worst error by 1 %% "
                        f"(0: never) {_default(ex.Table3Config, 'attained_patience', None)}")
    _add_workers(g, "the variants' attained columns")
    _add_threads(p)
    add_common_options(p, "quiet")

    p = _parser(sub, "figure1", "Figure 1: boundary representations h(n, 0), four panels",
                "Figure 1: h(n, 0) for n = 0..L of the checked constructions of linear, softmax, post-LN and\n"
                "bare pre-LN (at min(L, L_cap(d))), each in the plane that best holds its points.", cmd_figure1)
    p.add_argument("--out", required=True, help="output folder (figure1.png, figure1.pdf, figure1.json)")
    p.add_argument("--d", type=int, default=ex.Figure1Config.d, help="model dimension")
    p.add_argument("--L", type=int, default=ex.Figure1Config.L, help="largest count n drawn")


def _add_train(sub: Any) -> None:
    p = _parser(sub, "train", "train the toy model from random initialisation",
                "Train one toy model and write final metrics, the log and the parameters (readable by\n"
                "`countlens toy check --params`). A checkpoint is saved as it goes; an existing one resumes.",
                cmd_train)
    p.add_argument("--variant", required=True, choices=VARIANTS, help="the model variant")
    p.add_argument("--readout", default="regression", choices=READOUTS, help="the read-out head")
    p.add_argument("--d", type=int, default=16, help="model dimension")
    p.add_argument("--L", type=int, required=True, help="maximum length: the domain is n, m >= 0, n + m <= L")
    p.add_argument("--tau", type=float, default=None, help="score scale (default: 1/sqrt(d))")
    p.add_argument("--optimizer", default=TrainConfig.optimizer, help=f"one of {', '.join(OPTIMIZERS)}")
    p.add_argument("--steps", type=int, default=TrainConfig.steps, help="optimiser steps (L-BFGS iterations)")
    p.add_argument("--seed", type=int, default=TrainConfig.seed, help=f"initialisation and train/test split seed (default: {TrainConfig.seed})")
    p.add_argument("--cap", type=float, default=None, help="per-vector norm bound B, enforced by projection "
                                                           "(default: uncapped)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: 1 for L-BFGS, 1e-2 for Adam)")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size, help="adam-minibatch: pairs per batch")
    p.add_argument("--test-fraction", type=float, default=TrainConfig.test_fraction,
                   help="share of the domain's pairs held out (IID) for test exact accuracy")
    p.add_argument("--log-every", type=int, default=TrainConfig.log_every, help="steps between log entries")
    p.add_argument("--stop-when-passed", action="store_true", help="stop once the full-domain check passes")
    p.add_argument("--init-scale", type=float, default=TrainConfig.init_scale,
                   help="norm of every initial vector (approximately)")
    p.add_argument("--ce-scale", type=float, default=TrainConfig.ce_scale,
                   help="classification: cross-entropy on this multiple of the scores (loss temperature only)")
    p.add_argument("--loss", default=TrainConfig.loss, choices=LOSSES,
                   help="regression loss: mse, or max (smooth maximum of the squared error)")
    p.add_argument("--beta", type=float, default=TrainConfig.beta, help="sharpness of --loss max")
    p.add_argument("--working-set", type=int, default=TrainConfig.working_set,
                   help="0: train on the IID train split; k > 0: working-set training from the domain's edges "
                        "plus k random pairs, grown by the worst pairs after every failed check, every --log-every "
                        f"steps (default: {TrainConfig.working_set})")
    p.add_argument("--parametrization", default=TrainConfig.parametrization, choices=PARAMETRIZATIONS,
                   help="what the optimiser moves: the vectors' entries (cartesian) or each vector's log norm and "
                        "direction (polar)")
    p.add_argument("--patience", type=int, default=TrainConfig.patience,
                   help="stop after this many log steps in a row without lowering the best worst error by 1 %% "
                        "(0: never)")
    p.add_argument("--grow", type=int, default=TrainConfig.grow,
                   help="working set: worst pairs (and as many random ones) added after each failed check")
    p.add_argument("--checkpoint", default=None, help="checkpoint file (default: hidden file beside --json, "
                                                      "removed after success); an existing one is resumed")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints (0: only at the end)")
    p.add_argument("--json", required=True, help="output JSON")
    _add_threads(p)
    add_common_options(p, "quiet")

    p = _parser(sub, "table2", "Table 2: trained softmax (no LN), exact accuracy and worst error",
                "Table 2: train softmax without LN at each d and L for each seed; report test exact accuracy\n"
                "and full-domain worst error, mean [min, max] over seeds. Finished runs are kept beside\n"
                "--json, so an interrupted run resumes.", cmd_table2)
    p.add_argument("--d", default=None, help=f"comma-separated dimensions {_default(ex.Table2Config, 'd')}")
    p.add_argument("--L", default=None, help=f"comma-separated lengths {_default(ex.Table2Config, 'L')}")
    p.add_argument("--seeds", default=None, help=f"comma-separated seeds {_default(ex.Table2Config, 'seeds')}")
    p.add_argument("--steps", type=int, default=None, help=f"optimiser steps per run {_default(ex.Table2Config, 'steps')}")
    p.add_argument("--optimizer", default=ex.Table2Config.optimizer, help=f"one of {', '.join(OPTIMIZERS)}")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: 1 for L-BFGS, 1e-2 for Adam)")
    p.add_argument("--full", action="store_true", help="the paper's sizes (long: see BENCHMARKS.md)")
    p.add_argument("--json", required=True, help="output JSON")
    _add_workers(p, "the runs")
    _add_threads(p)
    add_common_options(p, "quiet")


def _figure_parser(sub: Any, name: str, help: str, description: str, func: Any,
                   cls: Any) -> argparse.ArgumentParser:
    """A figure command's parser with the options every figure has (defaults from ``cls``)."""
    p = _parser(sub, name, help, description, func)
    p.add_argument("--out", required=True, help=f"output folder ({name}.json, {name}.png, {name}.pdf)")
    p.add_argument("--variant", default=cls.variant, choices=VARIANTS, help="the model variant")
    p.add_argument("--d", type=int, default=cls.d, help="model dimension")
    p.add_argument("--full", action="store_true", help="the paper's sizes (long: see BENCHMARKS.md)")
    _add_threads(p)
    add_common_options(p, "quiet")
    return p


def _add_lbfgs_runs(p: argparse.ArgumentParser, cls: Any) -> None:
    p.add_argument("--seeds", default=None, help=f"comma-separated seeds {_default(cls, 'seeds')}")
    p.add_argument("--steps", type=int, default=None, help=f"L-BFGS steps per run {_default(cls, 'steps')}")
    p.add_argument("--lr", type=float, default=None, help="L-BFGS initial step length (default: 1)")


def _add_figures(sub: Any) -> None:
    cls = ex.Figure2Config
    p = _figure_parser(sub, "figure2", "Figure 2: regression vs classification read-out costs",
                "Figure 2: both read-outs trained by L-BFGS at each L (panels a-c, beside the classifier\n"
                "construction) and L_max under caps B (panel d: Table 3's attained and constructed columns).\n"
                "Finished runs are kept in OUT/.figure2.runs until the figure is written.", cmd_figure2, cls)
    p.add_argument("--L", default=None, help=f"lengths for panels a-c {_default(cls, 'L')}")
    _add_lbfgs_runs(p, cls)
    p.add_argument("--B", default=None, help=f"caps for panel d {_default(cls, 'B')}")
    p.add_argument("--table3", default=None, help="reuse a `countlens toy table3 --attained --json` result "
                                                  "for panel d instead of training (default: train here)")
    p.add_argument("--ce-scale", type=float, default=None, help="classifier loss temperature (default: L)")

    cls = ex.Figure3Config
    p = _figure_parser(sub, "figure3", "Figure 3: training dynamics of softmax, 3 seeds",
                "Figure 3: L-BFGS training of the regression model per seed: held-out exact accuracy, the\n"
                "parameter and score scales normalised by the theory's rates, and the high/low spacing ratio.",
                cmd_figure3, cls)
    p.add_argument("--L", type=int, default=None, help=f"maximum length {_default(cls, 'L')}")
    _add_lbfgs_runs(p, cls)

    cls = ex.Figure4Config
    p = _figure_parser(sub, "figure4", "Figure 4: mini-batch vs full-batch Adam",
                "Figure 4: full-batch Adam vs mini-batch Adam from the same initialisation and split. The\n"
                "mini-batch run takes more updates, as in the paper: each update sees one batch, not the\n"
                "whole training split.", cmd_figure4, cls)
    p.add_argument("--L", type=int, default=None, help=f"maximum length {_default(cls, 'L')}")
    p.add_argument("--steps", type=int, default=None, help=f"full-batch Adam updates {_default(cls, 'steps')}")
    p.add_argument("--minibatch-steps", type=int, default=None,
                   help=f"mini-batch Adam updates {_default(cls, 'minibatch_steps')}")
    p.add_argument("--batch-size", type=int, default=None, help=f"pairs per mini-batch {_default(cls, 'batch_size')}")
    p.add_argument("--lr", type=float, default=None, help=f"Adam learning rate {_default(cls, 'lr')}")
    p.add_argument("--seed", type=int, default=cls.seed, help=f"initialisation and split seed (default: {cls.seed})")


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
