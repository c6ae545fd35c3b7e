"""Full-domain check at L = 10,000, d = 16 (5·10^7 pairs): pairs per second of ``full_domain_check`` against
the baseline a researcher writes — a plain numpy loop over n, each row vectorised over m through the full
d-dimensional model — and against the chunked torch model path. Same parameters, same worst error.

    python bench/bench_toy_check.py [--L 10000] [--d 16]
"""

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from record import sci, span, this_command, write_row  # noqa: E402  (bench/ is on sys.path when run as a script)

from countlens.toy.check import full_domain_check, n_pairs  # noqa: E402
from countlens.toy.constructions import best_construction  # noqa: E402


def numpy_loop_check(cfg, p, L):
    """The baseline: for each n, all m at once, through o = λ Z, post-LN and the read-out (O(d) per pair)."""
    t = {k: v.numpy() for k, v in p.tensors().items()}
    Z = np.stack([t["x_b"], t["x_s"], t["x_l"]])  # (3, d)
    if cfg.ln_place == "pre":
        Z = (Z - Z.mean(1, keepdims=True)) / Z.std(1, keepdims=True)
        if cfg.ln_learned:
            Z = t["gamma"] * Z + t["beta"]
    s = cfg.tau * (Z @ Z[0])
    worst, pair = -1.0, (0, 0)
    for n in range(L + 1):
        m = np.arange(L - n + 1, dtype=np.float64)
        with np.errstate(divide="ignore"):
            logits = np.stack([np.full_like(m, s[0]), np.full_like(m, s[1] + np.log(n)), s[2] + np.log(m)], 1)
        logits -= logits.max(1, keepdims=True)
        lam = np.exp(logits)
        lam /= lam.sum(1, keepdims=True)
        h = lam @ Z  # (M, d)
        if cfg.ln_place == "post":
            h = (h - h.mean(1, keepdims=True)) / h.std(1, keepdims=True)
            if cfg.ln_learned:
                h = t["gamma"] * h + t["beta"]
        err = np.abs(h @ t["w"] + float(t["b0"]) - n)
        k = int(err.argmax())
        if err[k] > worst:
            worst, pair = float(err[k]), (n, k)
    return worst, pair


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--L", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--cls-L", type=int, default=500, help="length for the classification comparison")
    args = ap.parse_args()
    P = n_pairs(args.L)
    print(f"full-domain check, L={args.L}, d={args.d}: {P:,} pairs, one thread")
    rates, speedups, vs_model, base_s = [], [], [], []
    for variant in ("softmax-postln-learned", "softmax"):
        c = best_construction(variant, args.L, args.d, tune=False)
        t0 = time.perf_counter()
        fast = full_domain_check(c.cfg, c.params)
        t_fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        base_worst, base_pair = numpy_loop_check(c.cfg, c.params, args.L)
        t_base = time.perf_counter() - t0
        t0 = time.perf_counter()
        model = full_domain_check(c.cfg, c.params, method="model")
        t_model = time.perf_counter() - t0
        assert abs(base_worst - fast.worst_error) < 1e-8 and abs(model.worst_error - fast.worst_error) < 1e-8
        print(f"  {variant}: worst error {fast.worst_error:.10f} at {fast.worst_pair} (all three agree)")
        print(f"    full_domain_check (reduced form) {t_fast:7.2f} s  {P / t_fast:10.3g} pairs/s")
        print(f"    numpy loop over n (baseline)     {t_base:7.2f} s  {P / t_base:10.3g} pairs/s")
        print(f"    chunked torch model path         {t_model:7.2f} s  {P / t_model:10.3g} pairs/s")
        print(f"    speed-up vs numpy loop: {t_base / t_fast:.1f}x; vs torch model path: {t_model / t_fast:.1f}x")
        rates.append(P / t_fast)
        speedups.append(t_base / t_fast)
        vs_model.append(t_model / t_fast)
        base_s.append(t_base)
    command = this_command()
    write_row("bench_toy_check", "regression", what=f"full-domain check, L = {args.L:,}, d = {args.d}, one thread",
              countlens=f"reduced form, {span(rates, sci)} pairs/s",
              baseline=f"a numpy loop over n ({span(base_s, '{:.1f}', ' s')})", ratio=span(speedups, "{:.0f}", "×"),
              note=f"same worst error; {span(vs_model, '{:.0f}', '×')} the chunked torch model path",
              command=command)
    # classification (L+1 classes): reduced form (O(L) per pair) vs the torch model path (O(d L) per pair)
    from countlens.toy.model import ToyConfig, init_params

    cfg = ToyConfig("softmax-postln-learned", args.d, args.cls_L, readout="classification")
    p = init_params(cfg, seed=0)
    t0 = time.perf_counter()
    fast = full_domain_check(cfg, p)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = full_domain_check(cfg, p, method="model")
    t_model = time.perf_counter() - t0
    assert abs(fast.worst_error - model.worst_error) < 1e-8 and fast.worst_pair == model.worst_pair
    Pc = n_pairs(args.cls_L)
    print(f"  classification, L={args.cls_L} ({Pc:,} pairs x {args.cls_L + 1} classes), smallest gap "
          f"{fast.min_gap:.6f} (both agree)")
    print(f"    reduced form {t_fast:7.2f} s; torch model path {t_model:7.2f} s; speed-up {t_model / t_fast:.1f}x")
    write_row("bench_toy_check", "classification",
              what=f"full-domain check, classification read-out, L = {args.cls_L} ({args.cls_L + 1} classes)",
              countlens=f"reduced form, {t_fast:.2f} s", baseline=f"the chunked torch model path ({t_model:.2f} s)",
              ratio=f"{t_model / t_fast:.1f}×", note="same smallest gap and pair", command=command)


if __name__ == "__main__":
    main()
