"""Benchmark: the toy trainer's loss and gradient, beside the full-domain checker, single thread.

Part 1, per evaluation at ``--loss-L`` (default 2,000: 2,003,001 pairs), d = 16, softmax and post-LN: the
reduced-form loss and gradient (``countlens.toy.domain_loss``, what the trainer uses), autograd through the
model on count pairs (``countlens.toy.train.loss_fn``, O(d) per pair) and the full-domain check
(``countlens.toy.check``) on the same parameters, in pairs per second, with their ratios.

Part 2, one full-batch L-BFGS step at L = 250 (31,626 pairs). Ours evaluates the model on count pairs in closed
form (``countlens.toy.model``). The baseline is what a
researcher would otherwise write: the same loss and gradient with PyTorch autograd over explicit token
sequences (boundary + n spaces + m letters, padded to L + 1 tokens and masked), batched — far kinder than a
Python loop over pairs. Both compute the same MSE and gradient (checked here on a subset). The baseline cannot
hold all 31,626 sequences at once in sensible memory (8 GB of float64 activations), so it is timed on a
random subset and its per-pair cost scaled up; one L-BFGS step needs as many evaluations in both.

    python bench/bench_toy_train.py [--loss-L 2000] [--L 250] [--d 16] [--subset 2000] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
from record import sci, span, this_command, write_row  # noqa: E402  (bench/ is on sys.path when run as a script)

from countlens.toy import model  # noqa: E402
from countlens.toy.check import full_domain_check  # noqa: E402
from countlens.toy.domain_loss import PairSet, loss_and_grad  # noqa: E402
from countlens.toy.model import ToyConfig  # noqa: E402
from countlens.toy.train import TrainConfig, Trainer, loss_fn  # noqa: E402


def naive_loss(cfg: ToyConfig, p: model.ToyParams, n: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """MSE over explicit padded sequences: (P, L+1, d) embeddings, masked softmax attention from the boundary."""
    L = cfg.L
    pos = torch.arange(L + 1)  # (T,)
    ni, mi = n.long()[:, None], m.long()[:, None]  # (P, 1)
    tok = torch.where(pos == 0, 0, torch.where(pos <= ni, 1, torch.where(pos <= ni + mi, 2, 3)))  # (P, T)
    table = torch.stack([p.x_b, p.x_s, p.x_l, torch.zeros_like(p.x_b)])  # (4, d); row 3 = padding
    X = table[tok]  # (P, T, d)
    q = X[:, 0, :]  # (P, d) the boundary's query
    s = cfg.tau * torch.einsum("ptd,pd->pt", X, q)  # (P, T)
    s = s.masked_fill(tok == 3, float("-inf"))
    o = torch.einsum("pt,ptd->pd", torch.softmax(s, dim=1), X)  # (P, d)
    y = o @ p.w + p.b0  # (P,)
    return ((y - n) ** 2).mean()


def _grads(loss: torch.Tensor, p: model.ToyParams) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, list(p.tensors().values())))


def _best_of(fn, reps: int) -> float:
    """Fastest of ``reps`` timed calls (s): the least disturbed by other load on a shared machine."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def per_evaluation(L: int, d: int, reps: int) -> list[tuple[str, float, float, float]]:
    """Part 1: one loss-and-gradient evaluation over the full domain, three ways; per variant
    ``(variant, reduced-form pairs/s, autograd seconds, reduced form's speed-up over autograd)``."""
    out = []
    pairs = PairSet.full(L)
    P = len(pairs)
    n, m = model.full_domain(L)
    print(f"loss + gradient over the full domain, L={L} ({P:,} pairs), d={d}, float64, one thread "
          f"(best of {reps})")
    for variant in ("softmax", "softmax-postln-learned"):
        cfg = ToyConfig(variant, d, L)
        p = model.init_params(cfg, seed=0)
        leaves = list(p.tensors().values())
        for t in leaves:
            t.requires_grad_(True)
        value, grads = loss_and_grad(cfg, p, pairs)
        t0 = time.perf_counter()  # the slow path runs once: it is the reference and its timing
        ref = loss_fn(cfg, p, n, m)
        ref_grads = _grads(ref, p)
        t_model = time.perf_counter() - t0
        ref = float(ref.detach())
        assert abs(value - ref) <= 1e-9 * abs(ref), "loss mismatch"
        assert all(torch.allclose(grads[k], g, rtol=1e-8, atol=1e-12)
                   for k, g in zip(p.tensors(), ref_grads, strict=True)), "gradient mismatch"
        t_reduced = _best_of(lambda: loss_and_grad(cfg, p, pairs), reps)  # noqa: B023 (called at once)
        t_check = _best_of(lambda: full_domain_check(cfg, p.detach()), reps)  # noqa: B023
        print(f"  {variant}: loss {value:.6g} (both agree, gradients too)")
        print(f"    reduced form (domain_loss)     {t_reduced * 1e3:8.1f} ms  {P / t_reduced:10.3g} pairs/s")
        print(f"    autograd through model.forward {t_model * 1e3:8.1f} ms  {P / t_model:10.3g} pairs/s")
        print(f"    full-domain check              {t_check * 1e3:8.1f} ms  {P / t_check:10.3g} pairs/s")
        print(f"    reduced form vs autograd: {t_model / t_reduced:.1f}x faster; "
              f"vs the check: {t_reduced / t_check:.2f}x its time")
        out.append((variant, P / t_reduced, t_model, t_model / t_reduced))
    return out


def record_part1(part1: list[tuple[str, float, float, float]], L: int, d: int) -> None:
    """Part 1's row of BENCHMARKS.md (``bench/record.py``)."""
    names = {"softmax": "softmax", "softmax-postln-learned": "learned post-LN"}
    write_row("bench_toy_train", "gradient",
              what=f"loss + gradient over the full domain, L = {L:,}, d = {d}, one thread",
              countlens=", ".join(f"{sci(rate, 3)} pairs/s ({names[v]})" for v, rate, _, _ in part1),
              baseline=f"autograd through the model ({span([t for _, _, t, _ in part1], '{:.1f}', ' s')})",
              ratio=span([x for *_, x in part1], "{:.0f}", "×"), note="same loss and gradients",
              command=this_command())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss-L", type=int, default=2000, help="length of part 1 (per evaluation)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions in part 1 (the best counts)")
    ap.add_argument("--L", type=int, default=250, help="length of part 2 (L-BFGS step)")
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--subset", type=int, default=2000, help="pairs the naive baseline is timed on")
    ap.add_argument("--steps", type=int, default=5, help="L-BFGS steps to time (after 3 warm-up steps)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores")
    part1 = per_evaluation(args.loss_L, args.d, args.reps)
    record_part1(part1, args.loss_L, args.d)

    cfg = ToyConfig("softmax", args.d, args.L)
    tr = Trainer(cfg, TrainConfig(optimizer="lbfgs", steps=10**6, seed=0))
    P = len(tr.n)
    evals = []
    for _ in range(3):
        tr.step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        before = tr.optimizer.state[tr.optimizer._params[0]]["func_evals"]
        tr.step()
        evals.append(tr.optimizer.state[tr.optimizer._params[0]]["func_evals"] - before)
    step_s = (time.perf_counter() - t0) / args.steps
    ev = sum(evals) / len(evals)

    # per-evaluation cost (loss + gradient over the full domain), ours: the reduced form the trainer uses
    p = tr.params
    everything = PairSet.from_pairs(tr.n, tr.m)
    ours_eval = _best_of(lambda: loss_and_grad(cfg, p, everything), 5)

    # the naive baseline on a random subset, checked against ours on the same pairs
    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(P, generator=g)[: args.subset]
    n, m = tr.n[idx], tr.m[idx]
    ref = _grads(loss_fn(cfg, p, n, m), p)
    t0 = time.perf_counter()
    got = _grads(naive_loss(cfg, p, n, m), p)
    naive_subset = time.perf_counter() - t0
    assert all(torch.allclose(a, b, rtol=1e-8, atol=1e-10) for a, b in zip(ref, got, strict=True)), "mismatch"
    naive_eval = naive_subset * P / len(idx)

    print(f"toy L-BFGS step, softmax, L={args.L} ({P} pairs), d={args.d}, float64, {args.threads} thread(s)")
    print(f"  ours:  {step_s * 1e3:8.1f} ms per L-BFGS step ({ev:.1f} loss+grad evaluations), "
          f"{P * ev / step_s:,.0f} pairs/s; one evaluation {ours_eval * 1e3:.1f} ms = {P / ours_eval:,.0f} pairs/s")
    print(f"  naive: explicit padded sequences, {naive_subset:.2f} s for {len(idx)} pairs -> "
          f"{naive_eval:.1f} s per full-domain evaluation = {P / naive_eval:,.0f} pairs/s "
          f"(~{naive_eval * ev:.1f} s per L-BFGS step)")
    print(f"  ratio: {naive_eval / ours_eval:,.0f}x faster per evaluation (same gradients, checked)")
    write_row("bench_toy_train", "lbfgs_step", what=f"toy L-BFGS step, softmax, L = {args.L} ({P:,} pairs), "
              f"d = {args.d}, {args.threads} thread(s)", countlens=f"{step_s * 1e3:.0f} ms per step",
              baseline=f"autograd over padded sequences ({naive_eval:.1f} s per evaluation, from {len(idx):,} pairs)",
              ratio=f"{naive_eval / ours_eval:,.0f}×", note="per evaluation; same gradients", command=this_command())


if __name__ == "__main__":
    main()
