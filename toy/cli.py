"""``countlens toy ...``: construct, check, rates, lcap, table3, figure1 (training commands come from
``countlens.toy.train_cli`` where it exists). The CLI only parses, calls and writes."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from countlens.args import parse_float_list, parse_int_list
from countlens.errors import UsageError
from countlens.io import provenance, read_json, save_figure, write_json_atomic

try:  # helper commands for training (train, table2, figure2..4) and Table 3's attained column
    from countlens.toy import train_cli
except ImportError as exc:  # only a missing train_cli module is tolerated, never a broken one
    if getattr(exc, "name", None) not in ("countlens.toy.train_cli",):
        raise
    train_cli = None


def _tqdm(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False)


def _check_d(d: int, variant: str | None = None) -> None:
    from countlens.toy.constructions import min_dimension

    need = 3 if variant is None else min_dimension(variant)
    if d < need:
        raise UsageError(f"--d must be >= {need}" + (f" for {variant}" if variant else "")
                         + f" (LayerNorm needs two centred directions), got {d}")


def cmd_construct(args: argparse.Namespace) -> int:
    from countlens.toy.constructions import best_construction, validate

    validate(args.variant, args.L, args.d)
    if args.variant == "softmax-preln-bare":
        from countlens.toy.budget import l_infeasible

        bound, reason = l_infeasible(args.d, args.tau)
        if args.L >= bound:
            raise UsageError(f"L={args.L} is infeasible for softmax-preln-bare at d={args.d}: {reason}")
    try:
        c = best_construction(args.variant, args.L, args.d, tau=args.tau)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = c.to_dict()
    out["provenance"] = provenance({"variant": args.variant, "d": args.d, "L": args.L, "tau": c.cfg.tau})
    if args.json:
        write_json_atomic(args.json, out)
    ch = c.check
    print(f"{args.variant} d={args.d} L={args.L}: passed={ch.passed} worst_error={ch.worst_error:.6f} "
          f"at (n, m)={tuple(ch.worst_pair)} max_norm={ch.max_norm:.6g}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from countlens.toy.check import full_domain_check
    from countlens.toy.model import ToyParams

    if args.L < 1:
        raise UsageError(f"--L must be >= 1, got {args.L}")
    data = read_json(args.params, "parameter file")
    cfg, params = ToyParams.from_dict(data, L=args.L)
    res = full_domain_check(cfg, params, L=args.L)
    out = res.to_dict()
    out.update(variant=cfg.variant, d=cfg.d, tau=cfg.tau)
    out["provenance"] = provenance({"params": str(args.params), "L": args.L})
    if args.json:
        write_json_atomic(args.json, out)
    extra = f" min_gap={res.min_gap:.6g}" if res.min_gap is not None else ""
    print(f"{cfg.variant} d={cfg.d} L={args.L} ({res.pairs} pairs): passed={res.passed} "
          f"worst_error={res.worst_error:.6f} at (n, m)={tuple(res.worst_pair)} max_norm={res.max_norm:.6g}{extra}")
    return 0


def _variants(text: str | None) -> tuple[str, ...]:
    from countlens.toy.model import VARIANTS

    if not text:
        return VARIANTS
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in names if v not in VARIANTS]
    if bad:
        raise UsageError(f"unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}")
    return names


def cmd_rates(args: argparse.Namespace) -> int:
    from countlens.toy.budget import fit_rates

    Ls = parse_int_list(args.L, "--L")
    if min(Ls) < 1:
        raise UsageError(f"--L values must be >= 1, got {min(Ls)}")
    variants = _variants(args.variants)
    for v in variants:
        _check_d(args.d, v)
    bar = _tqdm(len(Ls) * len(variants), "rates")
    try:
        res = fit_rates(args.d, Ls, variants, tau=args.tau, progress=lambda v, L: bar.update(1))
    finally:
        bar.close()
    out = res.to_dict()
    out["provenance"] = provenance({"d": args.d, "L": Ls, "variants": list(variants), "tau": res.tau})
    if args.json:
        write_json_atomic(args.json, out)
    print(f"B_min(L) of the constructions, d={args.d}; slope of log B_min vs log L (claimed exponent)")
    print(f"{'variant':24s} " + " ".join(f"{L:>10d}" for L in Ls) + "      slope  L>=100  claimed")
    for v, fit in res.variants.items():
        slope = "-" if fit.slope is None else f"{fit.slope:.3f}"
        tail = "-" if fit.slope_L_ge_100 is None else f"{fit.slope_L_ge_100:.3f}"
        print(f"{v:24s} " + " ".join(f"{b:10.4g}" for b in fit.b_min) + f" {slope:>10s} {tail:>7s}  {fit.claimed}")
    return 0


def cmd_lcap(args: argparse.Namespace) -> int:
    from countlens.toy.budget import l_cap

    ds = parse_int_list(args.d, "--d")
    for d in ds:
        _check_d(d, "softmax-preln-bare")
    rows = []
    for d in _iter(ds, "lcap"):
        rows.append(l_cap(d, tau=None if args.tau is None else args.tau))
    out = {
        "d": ds, "l_cap": [r.l_cap for r in rows], "l_infeasible": [r.l_infeasible for r in rows],
        "b_min_at_cap": [r.b_min_at_cap for r in rows], "worst_error_at_cap": [r.worst_error_at_cap for r in rows],
        "tau": [r.tau for r in rows], "reason": [r.reason for r in rows],
        "provenance": provenance({"d": ds, "tau": args.tau}),
    }
    if args.json:
        write_json_atomic(args.json, out)
    for r in rows:
        have = "not searched" if r.l_cap is None else f"{r.l_cap} (constructed, verified)"
        print(f"d={r.d}: L_cap = {have}; L >= {r.l_infeasible} infeasible. Why finite: {r.reason}")
    return 0


def _iter(items, desc):
    bar = _tqdm(len(items), desc)
    for x in items:
        yield x
        bar.update(1)
    bar.close()


def cmd_table3(args: argparse.Namespace) -> int:
    from countlens.toy.budget import TABLE3_PAPER, TABLE3_VARIANTS, LMax, Table3Result, l_max

    Bs = parse_float_list(args.B, "--B")
    if min(Bs) <= 0:
        raise UsageError(f"--B values must be positive, got {min(Bs)}")
    _check_d(args.d)
    if args.attained and train_cli is None:
        raise UsageError("--attained needs the training commands (countlens.toy.train_cli), which are not installed")
    variants = TABLE3_VARIANTS
    tau = 1.0 / math.sqrt(args.d) if args.tau is None else float(args.tau)
    # each (variant, B) is kept in OUT.partial as it finishes, so an interrupted run resumes there
    partial = Path(str(args.json) + ".partial") if args.json else None
    done = read_json(partial, "partial results") if partial is not None and partial.is_file() else {}
    rows: dict[str, list] = {v: [] for v in variants}
    with _tqdm(len(Bs) * len(variants), "table3") as bar:
        for v in variants:
            for B in Bs:
                key = f"d={args.d}|tau={tau!r}|{v}|B={B!r}"
                if key in done:
                    row = dict(done[key])
                    row["L"] = float(row["L"]) if isinstance(row["L"], str) else row["L"]
                    rows[v].append(LMax(**row))
                else:
                    rows[v].append(l_max(v, float(B), args.d, tau))
                    done[key] = rows[v][-1].__dict__
                    if partial is not None:
                        write_json_atomic(partial, done)
                bar.update(1)
    res = Table3Result(args.d, tau, rows)
    out = res.to_dict()
    out["provenance"] = provenance({"d": args.d, "B": Bs, "tau": res.tau, "attained": bool(args.attained)})
    if args.attained:
        train_cli.add_table3_attained(out, args)
    if args.json:
        write_json_atomic(args.json, out)
        if partial is not None and partial.exists():
            partial.unlink()
    print(f"Table 3, constructed L_max(B) at d={args.d} (paper's constr. in brackets)")
    print(f"{'B':>8s} " + " ".join(f"{v:>28s}" for v in variants))
    for i, B in enumerate(Bs):
        cells = []
        for v in variants:
            L = res.variants[v][i].L
            paper = TABLE3_PAPER[v]
            ref = f" [{paper[(10, 30, 100, 300, 1000).index(int(B))]}]" if (
                args.d == 16 and float(B).is_integer() and int(B) in (10, 30, 100, 300, 1000)) else ""
            cells.append(f"{'inf' if math.isinf(L) else int(L)}{ref}".rjust(28))
        print(f"{B:8g} " + " ".join(cells))
    if args.attained and hasattr(train_cli, "format_attained"):
        print(train_cli.format_attained(out))
    return 0


def cmd_figure1(args: argparse.Namespace) -> int:
    from countlens.toy.figure1 import compute_figure1, plot_figure1

    _check_d(args.d)
    if args.L < 2:
        raise UsageError(f"--L must be >= 2, got {args.L}")
    res = compute_figure1(args.d, args.L)
    out = Path(args.out)
    data = res.to_dict()
    data["provenance"] = provenance({"d": args.d, "L": args.L})
    write_json_atomic(out / "figure1.json", data)
    paths = save_figure(plot_figure1(res), out / "figure1")
    print("wrote " + ", ".join(str(p) for p in [out / "figure1.json", *paths]))
    return 0


def _positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def register(subparsers) -> None:
    """Add ``countlens toy`` and its subcommands."""
    toy = subparsers.add_parser("toy", help="the toy theory: constructions, full-domain checks, norm budgets")
    sub = toy.add_subparsers(dest="toy_command", metavar="SUBCOMMAND", parser_class=type(toy))
    sub.required = True

    p = sub.add_parser("construct", help="explicit parameters that count on the full domain, checked")
    p.add_argument("--variant", required=True, help="one of the seven variants (SPEC §1)")
    p.add_argument("--d", type=_positive_int, required=True, help="model dimension")
    p.add_argument("--L", type=_positive_int, required=True, help="maximum length")
    p.add_argument("--tau", type=float, default=None, help="score scale (default 1/sqrt(d))")
    p.add_argument("--json", help="write the parameters and their check here")
    p.set_defaults(func=cmd_construct)

    p = sub.add_parser("check", help="full-domain check of a parameter file")
    p.add_argument("--params", required=True, help="JSON parameter file (as written by construct or train)")
    p.add_argument("--L", type=_positive_int, required=True, help="maximum length to check")
    p.add_argument("--json", help="write the check result here")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("rates", help="B_min(L) per variant and log-log slopes (Table 1)")
    p.add_argument("--d", type=_positive_int, default=16)
    p.add_argument("--L", default="10,30,100,300,1000", help="comma-separated lengths")
    p.add_argument("--variants", default=None, help="comma-separated variants (default: all)")
    p.add_argument("--tau", type=float, default=None)
    p.add_argument("--json", help="write the rates here")
    p.set_defaults(func=cmd_rates)

    p = sub.add_parser("lcap", help="L_cap(d) of softmax-preln-bare, with the bound that makes it finite")
    p.add_argument("--d", default="3,4,8,16", help="comma-separated dimensions")
    p.add_argument("--tau", type=float, default=None, help="score scale (default 1/sqrt(d) per d)")
    p.add_argument("--json", help="write the result here")
    p.set_defaults(func=cmd_lcap)

    p = sub.add_parser("table3", help="Table 3's constructed L_max(B) columns")
    p.add_argument("--d", type=_positive_int, default=16)
    p.add_argument("--B", default="10,30,100,300,1000", help="comma-separated caps")
    p.add_argument("--tau", type=float, default=None)
    p.add_argument("--json", help="write the table here")
    if train_cli is not None and hasattr(train_cli, "add_table3_attained_args"):
        train_cli.add_table3_attained_args(p)  # adds --attained and its own flags
    else:
        p.add_argument("--attained", action="store_true", help="also train under each cap (needs train_cli)")
    p.set_defaults(func=cmd_table3)

    p = sub.add_parser("figure1", help="Figure 1: boundary representations h(n, 0), four panels")
    p.add_argument("--out", required=True, help="output folder (figure1.png, figure1.pdf, figure1.json)")
    p.add_argument("--d", type=_positive_int, default=16)
    p.add_argument("--L", type=_positive_int, default=20)
    p.set_defaults(func=cmd_figure1)

    if train_cli is not None:
        train_cli.register(sub)
