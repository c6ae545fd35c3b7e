"""``countlens toy train | table2 | figure2 | figure3 | figure4`` and ``table3 --attained``.

Registered into ``countlens toy`` by :mod:`countlens.toy.cli`. This module only parses, calls an experiment
from :mod:`countlens.toy.experiments`, and writes its result (JSON with provenance, PNG+PDF figures).
Every experiment command has a reduced default size and ``--full`` for the paper's sizes; explicit flags
override either preset.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from countlens.args import parse_float_list, parse_int_list
from countlens.errors import UsageError
from countlens.io import provenance, read_json, save_figure, write_json_atomic
from countlens.toy import experiments as ex
from countlens.toy.model import READOUTS, VARIANTS, ToyConfig
from countlens.toy.train import OPTIMIZERS, TrainConfig, TrainingDiverged, train

# Reduced ("quick") and paper-sized ("full") presets. The paper trained for 20M/100M steps; ours are L-BFGS
# iterations, which converge in far fewer.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "table2": {
        "quick": {"d": [4, 16], "L": [250, 500], "seeds": [0, 1, 2], "steps": 150},
        "full": {"d": [4, 16], "L": [250, 500], "seeds": [0, 1, 2], "steps": 5000},
    },
    "table3": {
        "quick": {"grid": [10, 20, 50, 100, 200], "seeds": [0], "steps": 200},
        "full": {"grid": list(ex.PAPER_GRID), "seeds": [0, 1, 2], "steps": 3000},
    },
    "figure2": {
        "quick": {"L": [10, 20, 50], "seeds": [0], "steps": 2000, "B": [10, 30, 100]},
        "full": {"L": [10, 30, 100, 300, 1000], "seeds": [0, 1, 2], "steps": 10000, "B": [10, 30, 100, 300, 1000]},
    },
    "figure3": {
        "quick": {"L": 50, "seeds": [0, 1, 2], "steps": 150},
        "full": {"L": 250, "seeds": [0, 1, 2], "steps": 3000},
    },
    "figure4": {
        "quick": {"L": 100, "steps": 1000, "minibatch_steps": 2000},
        "full": {"L": 250, "steps": 20000, "minibatch_steps": 60000},
    },
}


def _with_threads(func: Any) -> Any:
    """Run a command with ``--threads`` torch intra-op threads (default 1), restoring the previous count.

    The toy's tensors are small: on a shared 2-core machine a second thread costs more in contention than it
    gains (a mini-batch step measured 5x slower with 2 threads under load), hence the default of 1.
    """
    import functools

    @functools.wraps(func)
    def run(args: argparse.Namespace, *rest: Any) -> Any:
        import torch

        n = getattr(args, "threads", 1)
        if n < 1:
            raise UsageError(f"--threads must be >= 1, got {n}")
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return func(args, *rest)
        finally:
            torch.set_num_threads(before)

    return run


def _preset(args: argparse.Namespace, name: str) -> dict[str, Any]:
    return PRESETS[name]["full" if getattr(args, "full", False) else "quick"]


def _ints(text: str | None, flag: str, default: list[int], minimum: int = 0) -> list[int]:
    values = default if text is None else parse_int_list(text, flag)
    bad = [v for v in values if v < minimum]
    if bad:
        raise UsageError(f"{flag} values must be >= {minimum}, got {bad[0]}")
    return values


def _positive(value: int | None, flag: str, default: int) -> int:
    value = default if value is None else value
    if value <= 0:
        raise UsageError(f"{flag} must be a positive integer, got {value}")
    return value


def _train_kw(args: argparse.Namespace) -> dict[str, Any]:
    kw = {}
    if getattr(args, "lr", None) is not None:
        kw["lr"] = args.lr
    if getattr(args, "init_scale", None) is not None:
        kw["init_scale"] = args.init_scale
    return kw


def _cache_for(target: Path) -> ex.RunCache:
    return ex.RunCache(target.parent / f".{target.name}.runs")


def _done(cache: ex.RunCache) -> None:
    """Finished: the per-run cache has served its purpose (a rerun recomputes deterministically)."""
    if cache.folder is not None:
        shutil.rmtree(cache.folder, ignore_errors=True)


# --- train -------------------------------------------------------------------------------------------------


@_with_threads
def _cmd_train(args: argparse.Namespace) -> int:
    cfg = ToyConfig(variant=args.variant, d=args.d, L=args.L, readout=args.readout, tau=args.tau)
    tcfg = TrainConfig(optimizer=args.optimizer, steps=args.steps, seed=args.seed, cap=args.cap, lr=args.lr,
                       batch_size=args.batch_size, test_fraction=args.test_fraction, log_every=args.log_every,
                       stop_when_passed=args.stop_when_passed, init_scale=args.init_scale, ce_scale=args.ce_scale)
    out = Path(args.json)
    ckpt = Path(args.checkpoint) if args.checkpoint else out.parent / f".{out.name}.ckpt"
    if args.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    try:
        result = train(cfg, tcfg, checkpoint=ckpt, checkpoint_every=args.checkpoint_every, progress=True)
    except TrainingDiverged as exc:
        where = f"; the last checkpoint, {ckpt}, resumes before it" if ckpt.exists() else ""
        print(f"countlens: error: {exc}; nothing written (lower --lr or set --cap){where}", file=sys.stderr)
        return 1
    data = result.to_dict()  # `countlens toy check --params OUT` reads the nested `params` as is
    write_json_atomic(out, {**data, "provenance": provenance({"model": vars(cfg), "train": vars(tcfg)})})
    if not args.checkpoint:
        ckpt.unlink(missing_ok=True)
    print(f"{cfg.variant} {cfg.readout} d={cfg.d} L={cfg.L}: {result.steps_run} steps, test exact accuracy "
          f"{result.test_exact_accuracy:.4f}, full-domain worst error {result.full_domain_worst_error:.4g} at "
          f"{tuple(result.worst_pair)} -> {'PASSED' if result.passed else 'failed'}; max norm {result.max_norm:.4g}")
    print(f"wrote {out}")
    return 0


def _add_train(sub: Any) -> None:
    p = sub.add_parser("train", help="train the toy model from random initialisation",
                       description="Train one toy model (SPEC §1) and write final metrics, the log and the "
                                   "parameters (readable by `countlens toy check --params`).")
    p.add_argument("--variant", required=True, choices=VARIANTS)
    p.add_argument("--readout", default="regression", choices=READOUTS)
    p.add_argument("--d", type=int, default=16)
    p.add_argument("--L", type=int, required=True)
    p.add_argument("--tau", type=float, default=None, help="score scale (default 1/sqrt(d))")
    p.add_argument("--optimizer", default="lbfgs", help=f"one of {', '.join(OPTIMIZERS)}")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cap", type=float, default=None, help="per-vector norm bound B, enforced by projection")
    p.add_argument("--lr", type=float, default=None, help="default 1 (L-BFGS) or 1e-2 (Adam)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--stop-when-passed", action="store_true", help="stop once the full-domain check passes")
    p.add_argument("--init-scale", type=float, default=1.0)
    p.add_argument("--ce-scale", type=float, default=1.0, help="classification: cross-entropy on this multiple "
                                                               "of the scores (loss temperature only)")
    p.add_argument("--checkpoint", default=None, help="checkpoint file (default: hidden file beside --json, "
                                                      "removed after success); an existing one is resumed")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--json", required=True, help="output JSON")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.set_defaults(func=_cmd_train)


# --- table2 ------------------------------------------------------------------------------------------------


@_with_threads
def _cmd_table2(args: argparse.Namespace) -> int:
    pre = _preset(args, "table2")
    ds = _ints(args.d, "--d", pre["d"], 1)
    Ls = _ints(args.L, "--L", pre["L"], 1)
    seeds = _ints(args.seeds, "--seeds", pre["seeds"])
    steps = _positive(args.steps, "--steps", pre["steps"])
    if args.optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer {args.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    out = Path(args.json)
    cache = _cache_for(out)
    result = ex.table2(ds, Ls, seeds, steps, optimizer=args.optimizer, cache=cache, progress=True, **_train_kw(args))
    result.provenance = provenance({"d": ds, "L": Ls, "seeds": seeds, "steps": steps, "optimizer": args.optimizer,
                                    "full": args.full})
    write_json_atomic(out, result.to_dict())
    _done(cache)
    print(result.format())
    print(f"wrote {out}")
    return 0


def _add_table2(sub: Any) -> None:
    p = sub.add_parser("table2", help="Table 2: trained softmax (no LN), exact accuracy and worst error",
                       description="Train softmax without LN at each d and L for each seed; report test exact "
                                   "accuracy and full-domain worst error, mean [min, max].")
    p.add_argument("--d", default=None, help="dimensions (default 4,16)")
    p.add_argument("--L", default=None, help="lengths (default 250,500)")
    p.add_argument("--seeds", default=None, help="default 0,1,2")
    p.add_argument("--steps", type=int, default=None, help="L-BFGS steps per run (quick 150, --full 5000)")
    p.add_argument("--optimizer", default="lbfgs")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--full", action="store_true", help="the paper's sizes (long: see BENCHMARKS.md)")
    p.add_argument("--json", required=True)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.set_defaults(func=_cmd_table2)


# --- table3 --attained (hooked into helper 1's table3 parser) -----------------------------------------------


def add_table3_attained_args(parser: argparse.ArgumentParser) -> None:
    """Add the flags of Table 3's trained ("attained") column to the ``countlens toy table3`` parser."""
    g = parser.add_argument_group("attained column (training under the cap)")
    g.add_argument("--attained", action="store_true", help="also train under each cap B and report the largest "
                                                           "grid length that passes (a lower bound on L_max)")
    g.add_argument("--attained-grid", default=None, help="lengths to climb (quick 10,20,50,100,200; "
                                                         "--attained-full the paper's grid up to 10000)")
    g.add_argument("--attained-seeds", default=None, help="seeds tried per length (quick 0; full 0,1,2)")
    g.add_argument("--attained-steps", type=int, default=None, help="L-BFGS steps per run (quick 200)")
    g.add_argument("--attained-full", action="store_true", help="the paper's grid, seeds and more steps")


@_with_threads
def add_table3_attained(result_dict: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Add ``attained`` (aligned with ``B``) and ``attained_next_failing`` to each variant of a table3
    result ``{"variants": {V: {"B": [...], "l_max": [...]}}}``; a no-op without ``--attained``."""
    if not getattr(args, "attained", False):
        return result_dict
    pre = PRESETS["table3"]["full" if args.attained_full else "quick"]
    grid = _ints(args.attained_grid, "--attained-grid", pre["grid"], 1)
    seeds = _ints(args.attained_seeds, "--attained-seeds", pre["seeds"])
    steps = _positive(args.attained_steps, "--attained-steps", pre["steps"])
    d = args.d if isinstance(args.d, int) else parse_int_list(str(args.d), "--d")[0]
    variants = result_dict.get("variants", {})
    json_target = getattr(args, "json", None)
    cache = _cache_for(Path(json_target)) if json_target else ex.RunCache(None)
    for v, row in variants.items():
        Bs = [float(b) for b in row["B"]]
        att = ex.table3_attained([v], Bs, d, grid, seeds, steps, cache=cache, progress=True)
        row["attained"] = att.variants[v]["attained"]
        row["attained_next_failing"] = att.variants[v]["attained_next_failing"]
        row["attained_runs"] = att.variants[v]["runs"]
    result_dict["attained_config"] = {"d": d, "grid": sorted(grid), "seeds": seeds, "steps": steps,
                                      "optimizer": "lbfgs", "rechecked": "full_domain_check on the saved params"}
    _done(cache)
    return result_dict


def format_attained(result_dict: dict[str, Any]) -> str:
    """The attained and constructed columns side by side, one block per variant."""
    lines = []
    for v, row in result_dict.get("variants", {}).items():
        if "attained" not in row:
            continue
        lines.append(f"{v}:  {'B':>6} {'attained':>9} {'next fails':>10} {'constr.':>8}")
        for i, B in enumerate(row["B"]):
            nxt = row["attained_next_failing"][i]
            lm = row.get("l_max", [None] * len(row["B"]))[i]
            lines.append(f"{'':{len(v) + 2}} {B:>6g} {row['attained'][i]:>9} {str(nxt if nxt else '-'):>10} "
                         f"{str(lm):>8}")
    return "\n".join(lines)


# --- figures -----------------------------------------------------------------------------------------------


def _out_dir(args: argparse.Namespace) -> Path:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; pass a folder")
    return out


def _lmax_panel(args: argparse.Namespace, d: int, Bs: list[float], cache: ex.RunCache) -> dict[str, Any]:
    """Panel (d)'s data: from --table3 FILE if given (constr. and attained), else computed here."""
    if args.table3:
        data = read_json(args.table3, "--table3 file")
        variants = data.get("variants") if isinstance(data, dict) else None
        if not isinstance(variants, dict) or not all("B" in r for r in variants.values()):
            raise UsageError(f"--table3 {args.table3} is not a `countlens toy table3 --json` result")
        return variants
    from countlens.toy.budget import table3_constructed

    constructed = table3_constructed(d, tuple(Bs), variants=ex.TABLE3_VARIANTS).to_dict()["variants"]
    pre = PRESETS["table3"]["full" if args.full else "quick"]
    att = ex.table3_attained(list(ex.TABLE3_VARIANTS), Bs, d, pre["grid"], pre["seeds"], pre["steps"], cache=cache,
                             progress=True)
    out = {}
    for v in ex.TABLE3_VARIANTS:
        row = dict(constructed[v])
        row.update(attained=att.variants[v]["attained"], attained_next_failing=att.variants[v]["attained_next_failing"])
        out[v] = row
    return out


@_with_threads
def _cmd_figure2(args: argparse.Namespace) -> int:
    from countlens.toy.train_figures import plot_figure2

    pre = _preset(args, "figure2")
    Ls = _ints(args.L, "--L", pre["L"], 1)
    seeds = _ints(args.seeds, "--seeds", pre["seeds"])
    steps = _positive(args.steps, "--steps", pre["steps"])
    Bs = parse_float_list(args.B, "--B") if args.B else [float(b) for b in pre["B"]]
    out = _out_dir(args)
    cache = ex.RunCache(out / ".figure2.runs")
    lmax = _lmax_panel(args, args.d, Bs, cache)
    result = ex.figure2(Ls, seeds, steps, d=args.d, variant=args.variant, lmax=lmax, ce_scale=args.ce_scale,
                        cache=cache, progress=True, **_train_kw(args))
    result.provenance = provenance({"L": Ls, "seeds": seeds, "steps": steps, "d": args.d, "variant": args.variant,
                                    "B": Bs, "table3": args.table3, "full": args.full,
                                    "ce_scale": args.ce_scale if args.ce_scale is not None else "L"})
    return _write_figure(out, "figure2", result, plot_figure2, cache)


@_with_threads
def _cmd_figure3(args: argparse.Namespace) -> int:
    from countlens.toy.train_figures import plot_figure3

    pre = _preset(args, "figure3")
    L = _positive(args.L, "--L", pre["L"])
    seeds = _ints(args.seeds, "--seeds", pre["seeds"])
    steps = _positive(args.steps, "--steps", pre["steps"])
    out = _out_dir(args)
    cache = ex.RunCache(out / ".figure3.runs")
    result = ex.figure3(L, seeds, steps, d=args.d, variant=args.variant, log_every=max(1, steps // 50), cache=cache,
                        progress=True, **_train_kw(args))
    result.provenance = provenance({"L": L, "seeds": seeds, "steps": steps, "d": args.d, "variant": args.variant,
                                    "full": args.full})
    return _write_figure(out, "figure3", result, plot_figure3, cache)


@_with_threads
def _cmd_figure4(args: argparse.Namespace) -> int:
    from countlens.toy.train_figures import plot_figure4

    pre = _preset(args, "figure4")
    L = _positive(args.L, "--L", pre["L"])
    steps = _positive(args.steps, "--steps", pre["steps"])
    mini = _positive(args.minibatch_steps, "--minibatch-steps", pre["minibatch_steps"])
    batch = _positive(args.batch_size, "--batch-size", 1024)
    lr = 1e-2 if args.lr is None else args.lr
    out = _out_dir(args)
    cache = ex.RunCache(out / ".figure4.runs")
    result = ex.figure4(L, steps, mini, seed=args.seed, d=args.d, variant=args.variant, batch_size=batch, lr=lr,
                        log_every=max(1, max(steps, mini) // 100), cache=cache, progress=True)
    result.provenance = provenance({"L": L, "steps": steps, "minibatch_steps": mini, "batch_size": batch, "lr": lr,
                                    "seed": args.seed, "d": args.d, "variant": args.variant, "full": args.full})
    return _write_figure(out, "figure4", result, plot_figure4, cache)


def _write_figure(out: Path, name: str, result: Any, plot: Any, cache: ex.RunCache) -> int:
    fig = plot(result)  # drawn first: a plotting failure leaves no result half-written
    write_json_atomic(out / f"{name}.json", result.to_dict())
    paths = save_figure(fig, out / name)
    _done(cache)
    print(f"wrote {out / f'{name}.json'}, " + ", ".join(str(p) for p in paths))
    return 0


def _add_figures(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", required=True, help="output folder (JSON + PNG + PDF)")
    common.add_argument("--d", type=int, default=16)
    common.add_argument("--full", action="store_true", help="the paper's sizes (long: see BENCHMARKS.md)")
    common.add_argument("--lr", type=float, default=None)
    common.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")

    p = sub.add_parser("figure2", parents=[common], help="Figure 2: regression vs classification read-out costs")
    p.add_argument("--variant", default="softmax-postln-learned", choices=VARIANTS)
    p.add_argument("--L", default=None, help="lengths for panels a-c (quick 10,20,50)")
    p.add_argument("--seeds", default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--B", default=None, help="caps for panel d (quick 10,30,100)")
    p.add_argument("--table3", default=None, help="reuse a `countlens toy table3 --attained --json` result "
                                                  "for panel d instead of training")
    p.add_argument("--ce-scale", type=float, default=None, help="classifier loss temperature (default: L)")
    p.set_defaults(func=_cmd_figure2)

    p = sub.add_parser("figure3", parents=[common], help="Figure 3: training dynamics of softmax, 3 seeds")
    p.add_argument("--variant", default="softmax", choices=VARIANTS)
    p.add_argument("--L", type=int, default=None, help="quick 50, --full 250")
    p.add_argument("--seeds", default=None)
    p.add_argument("--steps", type=int, default=None)
    p.set_defaults(func=_cmd_figure3)

    p = sub.add_parser("figure4", parents=[common], help="Figure 4: mini-batch vs full-batch Adam")
    p.add_argument("--variant", default="softmax", choices=VARIANTS)
    p.add_argument("--L", type=int, default=None, help="quick 100, --full 250")
    p.add_argument("--steps", type=int, default=None, help="full-batch Adam steps")
    p.add_argument("--minibatch-steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_figure4)


def register(toy_subparsers: Any) -> None:
    """Add ``train, table2, figure2, figure3, figure4`` to the ``countlens toy`` subparsers."""
    _add_train(toy_subparsers)
    _add_table2(toy_subparsers)
    _add_figures(toy_subparsers)


__all__ = ["register", "add_table3_attained_args", "add_table3_attained", "format_attained", "PRESETS"]
