"""The training loss over a set of count pairs, and its gradient, at the cost of the full-domain check.

The boundary output is always ``o = λ_b z_b + λ_s z_s + λ_l z_l`` (``docs/definitions.md §1``), so the loss
depends on the trainable vectors only through a handful of *reduced* quantities: the scores
``s = τ Z z_b`` (3,), the read-out of each token vector (``q = Z w`` (3,), or with post-LN ``p = Zc (w ⊙ γ)``
(3,), the centred Gram matrix ``G = Zc Zcᵀ`` (3, 3) and ``const = w·β + b0``). For regression this module
computes those quantities, the loss and its gradient in float64 numpy — per pair analytically, then by the
chain rule back through the O(d) reduced form (torch autograd there would cost more than the pairs of a
working set: ~1 ms per call).

Per pair the work is a few multiply-adds, independent of ``d``. Pairs are grouped by ``n``: within a row the
softmax shares ``β = λ_b / (λ_b + λ_s)`` and ``ρ = e^{s_l} / (e^{s_b} + n e^{s_s})``, so a pair needs no
exponential: ``t = m ρ``, ``μ = 1 / (1 + t) = λ_b + λ_s`` and ``λ_l = t μ``. ``ρ`` comes from a log-sum-exp
and is clipped at ``e^690``, where ``λ_l = 1`` to rounding for every ``m >= 1``, so norms of 1e4 (scores of
1e8) stay finite. The gradient needs, per row, only the sums ``Σ eμ``, ``Σ eλ_l``, ``Σ eμλ_l`` of the
loss's derivative ``e`` with respect to the output (three more for post-LN); the rest is O(rows).

Losses (regression): ``"mse"``, the mean squared error to the count, and ``"max"``, a smooth maximum of the squared error, ``(1/β) log mean exp(β r²)``, which tends to the
worst squared error as ``β`` grows (``beta`` sets it; the optimum of rounding-exact counting is a max-error
problem). Classification: cross-entropy of ``ce_scale ×`` the class scores over ``L + 1`` classes; there is no
per-row shortcut (one score per class), so it runs torch autograd over the reduced form ``λ·P_k / norm +
const_k`` with ``P`` (3, L+1), which still drops the factor ``d``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from countlens.toy.model import ToyConfig, ToyParams, token_vectors

CHUNK = 1 << 15  # pairs per numpy pass: each float64 buffer stays in the L2 cache
LOSSES = ("mse", "max")
_LOG_RHO_MAX = 690.0  # e^690 ≈ 1e299: m·ρ stays finite for any m <= 1e9


@dataclass(frozen=True)
class PairSet:
    """Count pairs grouped by ``n`` (rows in ascending order), as the loss evaluates them.

    n: (R,) the distinct counts, float64. starts: (R+1,) offsets of each row's pairs. m: (P,) float64.
    weight: (P,) float64 or ``None`` (all 1).
    """

    n: np.ndarray
    starts: np.ndarray
    m: np.ndarray
    weight: np.ndarray | None = None

    @classmethod
    def from_pairs(cls, n, m, weight=None) -> PairSet:
        """From per-pair counts (any order, torch or numpy; duplicates allowed)."""
        n = np.asarray(torch.as_tensor(n).detach().cpu(), dtype=np.float64).ravel()
        m = np.asarray(torch.as_tensor(m).detach().cpu(), dtype=np.float64).ravel()
        if n.shape != m.shape:
            raise ValueError(f"n and m differ in length ({len(n)} vs {len(m)})")
        order = np.lexsort((m, n))
        n, m = n[order], m[order]
        w = None if weight is None else np.asarray(weight, dtype=np.float64).ravel()[order]
        rows, starts = np.unique(n, return_index=True)
        return cls(rows, np.append(starts, len(n)).astype(np.int64), np.ascontiguousarray(m), w)

    @classmethod
    def full(cls, L: int, n0: int = 0, n1: int | None = None) -> PairSet:
        """Every admissible pair ``n + m <= L`` (``(L+1)(L+2)/2`` pairs), or those of rows ``n0 <= n < n1``."""
        n1 = L + 1 if n1 is None else n1
        n = np.arange(n0, n1, dtype=np.float64)
        counts = (L + 1 - np.arange(n0, n1)).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        m = (np.arange(starts[-1]) - np.repeat(starts[:-1], counts)).astype(np.float64)
        return cls(n, starts, m, None)

    def __len__(self) -> int:
        return len(self.m)

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-pair ``(n, m)``: two (P,) float64 arrays."""
        return np.repeat(self.n, np.diff(self.starts)), self.m

    def total_weight(self) -> float:
        return float(len(self.m) if self.weight is None else self.weight.sum())

    def chunks(self, size: int = CHUNK):
        """Row ranges ``(r0, r1)`` holding about ``size`` pairs each (a row is never split)."""
        r0, R = 0, len(self.n)
        while r0 < R:
            r1 = int(np.searchsorted(self.starts, self.starts[r0] + size, side="right")) - 1
            r1 = min(max(r1, r0 + 1), R)
            yield r0, r1
            r0 = r1


# --- reduced form (torch, differentiable) ----------------------------------------------------------------


def reduced_form(cfg: ToyConfig, p: ToyParams) -> dict[str, torch.Tensor]:
    """The quantities the loss depends on, as differentiable torch tensors.

    ``s`` (3,) scores; regression without post-LN: ``q`` (3,) and ``b0`` (); with post-LN: ``p`` (3,),
    ``G`` (3, 3) and ``const`` (); classification: ``P`` (3, L+1), ``const`` (L+1,) and (post-LN) ``G``.
    """
    z = token_vectors(cfg, p)  # (3, d)
    out = {"s": cfg.tau * (z @ z[0])}  # (3,)
    if cfg.readout == "regression":
        if cfg.ln_place != "post":
            out.update(q=z @ p.w, b0=p.b0)
            return out
        zc = z - z.mean(dim=1, keepdim=True)  # (3, d)
        wg = p.w * p.gamma if cfg.ln_learned else p.w  # (d,)
        const = p.w @ p.beta + p.b0 if cfg.ln_learned else p.b0
        out.update(p=zc @ wg, G=zc @ zc.T, const=const)
        return out
    if cfg.ln_place != "post":
        out.update(P=z @ p.U.T, const=p.c)
        return out
    zc = z - z.mean(dim=1, keepdim=True)
    Ug = p.U * p.gamma if cfg.ln_learned else p.U  # (K, d)
    const = p.U @ p.beta + p.c if cfg.ln_learned else p.c
    out.update(P=zc @ Ug.T, G=zc @ zc.T, const=const)
    return out


def _regression_form(cfg: ToyConfig, p: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict]:
    """:func:`reduced_form` of a regression model in numpy, and what :func:`_regression_form_backward`
    needs (torch autograd over these few O(d) operations would cost more than the pairs themselves)."""
    X = np.stack([p["x_b"], p["x_s"], p["x_l"]])  # (3, d)
    ctx: dict[str, Any] = {"X": X}
    Z = X
    if cfg.ln_place == "pre":
        Xc = X - X.mean(axis=1, keepdims=True)
        sd = np.sqrt((Xc * Xc).mean(axis=1, keepdims=True) + cfg.eps)  # (3, 1)
        Y = Xc / sd
        ctx.update(Xc=Xc, sd=sd, Y=Y)
        Z = p["gamma"] * Y + p["beta"] if cfg.ln_learned else Y
    ctx["Z"] = Z
    rf = {"s": cfg.tau * (Z @ Z[0])}
    if cfg.ln_place != "post":
        rf.update(q=Z @ p["w"], b0=np.asarray(p["b0"]))
        return rf, ctx
    Zc = Z - Z.mean(axis=1, keepdims=True)
    wg = p["w"] * p["gamma"] if cfg.ln_learned else p["w"]
    const = p["w"] @ p["beta"] + p["b0"] if cfg.ln_learned else p["b0"]
    ctx.update(Zc=Zc, wg=wg)
    rf.update(p=Zc @ wg, G=Zc @ Zc.T, const=np.asarray(const))
    return rf, ctx


def _regression_form_backward(cfg: ToyConfig, p: dict[str, np.ndarray], ctx: dict,
                              g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Chain rule from the reduced quantities' gradient ``g`` back to every trainable vector."""
    Z = ctx["Z"]
    out: dict[str, np.ndarray] = {}
    gZ = cfg.tau * np.outer(g["s"], Z[0])  # s_j = τ z_j · z_b
    gZ[0] += cfg.tau * (g["s"] @ Z)
    if cfg.ln_place != "post":
        gZ += np.outer(g["q"], p["w"])
        out.update(w=Z.T @ g["q"], b0=g["b0"])
    else:
        Zc = ctx["Zc"]
        gZc = np.outer(g["p"], ctx["wg"]) + (g["G"] + g["G"].T) @ Zc
        gwg = Zc.T @ g["p"]
        if cfg.ln_learned:
            out.update(w=gwg * p["gamma"] + g["const"] * p["beta"], gamma=gwg * p["w"], beta=g["const"] * p["w"])
        else:
            out["w"] = gwg
        out["b0"] = g["const"]
        gZ += gZc - gZc.mean(axis=1, keepdims=True)
    gX = gZ
    if cfg.ln_place == "pre":
        gY = gZ
        if cfg.ln_learned:
            out.update(gamma=(gZ * ctx["Y"]).sum(axis=0), beta=gZ.sum(axis=0))
            gY = gZ * p["gamma"]
        Xc, sd = ctx["Xc"], ctx["sd"]
        gXc = gY / sd - Xc * ((gY * Xc).mean(axis=1, keepdims=True) / sd**3)
        gX = gXc - gXc.mean(axis=1, keepdims=True)
    out.update(x_b=gX[0], x_s=gX[1], x_l=gX[2])
    return out


# --- regression: per-row scalars, per-pair passes --------------------------------------------------------


def _rows(cfg: ToyConfig, rf: dict[str, np.ndarray], n: np.ndarray) -> dict[str, np.ndarray]:
    """Per-row scalars of the softmax (β, βs = 1 − β, ρ) and of the read-out, for rows ``n`` (R,)."""
    s = rf["s"]
    if cfg.attention == "linear":
        q = rf["q"]
        return {"alpha": s[0] * q[0] + rf["b0"] + n * (s[1] * q[1] - 1.0)}
    with np.errstate(divide="ignore"):
        ls = s[1] + np.log(n)  # -inf at n = 0
    lse = np.logaddexp(s[0], ls)  # (R,)
    beta, betas = np.exp(s[0] - lse), np.exp(ls - lse)
    rho = np.exp(np.minimum(s[2] - lse, _LOG_RHO_MAX))
    out = {"beta": beta, "betas": betas, "rho": rho}
    if cfg.ln_place != "post":
        a = beta * rf["q"][0] + betas * rf["q"][1]  # output at λ_l = 0
        out.update(a=a, alpha=a - n + rf["b0"], delta=rf["q"][2] - a)
    else:
        G, d = rf["G"], cfg.d
        out.update(Pa=beta * rf["p"][0] + betas * rf["p"][1],
                   A=(beta * beta * G[0, 0] + 2 * beta * betas * G[0, 1] + betas * betas * G[1, 1]) / d,
                   C=2 * (beta * G[0, 2] + betas * G[1, 2]) / d, k=rf["const"] - n)
    return out


def _chunk_forward(cfg: ToyConfig, rf: dict, ex, m: np.ndarray) -> tuple[np.ndarray, dict]:
    """Residuals ``r = ŷ − n`` (B,) of one chunk and what its backward pass reuses.

    ex(name): the row scalar ``name`` repeated over the chunk's pairs, (B,). m: (B,).
    """
    if cfg.attention == "linear":
        r = m * (rf["s"][2] * rf["q"][2])
        r += ex("alpha")
        return r, {}
    t = m * ex("rho")
    mu = t + 1.0
    np.reciprocal(mu, out=mu)  # λ_b + λ_s
    lam = t
    lam *= mu  # λ_l
    if cfg.ln_place != "post":
        r = ex("delta")
        r *= lam
        r += ex("alpha")
        return r, {"mu": mu, "lam": lam}
    num = ex("Pa")
    num *= mu
    num += rf["p"][2] * lam
    quad = ex("A")
    quad *= mu
    quad += ex("C") * lam
    quad *= mu
    quad += (rf["G"][2, 2] / cfg.d) * (lam * lam)
    if cfg.eps:
        quad += cfg.eps
    np.maximum(quad, 0.0, out=quad)
    rs = np.sqrt(quad, out=quad)
    np.reciprocal(rs, out=rs)  # 1 / sqrt(λᵀGλ/d + eps)
    yc = num
    yc *= rs  # read-out of LN(o) without const
    r = yc + ex("k")
    return r, {"mu": mu, "lam": lam, "rs": rs, "yc": yc}


def _chunk_backward(cfg: ToyConfig, e: np.ndarray, ctx: dict, m: np.ndarray, local: np.ndarray) -> dict:
    """Row sums of the chunk's output-gradient ``e`` (B,) that the reduced gradient needs. local: row starts."""
    red = lambda x: np.add.reduceat(x, local)  # noqa: E731
    if cfg.attention == "linear":
        return {"E": red(e), "Em": float(e @ m)}
    mu, lam = ctx["mu"], ctx["lam"]
    if cfg.ln_place != "post":
        em = e * mu
        return {"Sm": red(em), "Sl": red(e * lam), "Sml": red(em * lam)}
    er = e * ctx["rs"]
    k = er * ctx["yc"]
    k *= ctx["rs"]  # e N rs³
    km = k * mu
    return {"E": red(e), "Pm": red(er * mu), "Pl": red(er * lam), "Km": red(km), "Kl": red(k * lam),
            "Kml": red(km * lam)}


def _reduced_grad(cfg: ToyConfig, rf: dict, rows: dict, n: np.ndarray, S: dict) -> dict[str, np.ndarray]:
    """Gradient with respect to the reduced quantities from the per-row sums ``S`` (each (R,))."""
    s = rf["s"]
    if cfg.attention == "linear":
        q, E = rf["q"], S["E"].sum()
        En = float(n @ S["E"])
        return {"s": np.array([q[0] * E, q[1] * En, q[2] * S["Em"]]),
                "q": np.array([s[0] * E, s[1] * En, s[2] * S["Em"]]), "b0": np.array(E)}
    beta, betas = rows["beta"], rows["betas"]
    if cfg.ln_place != "post":
        q, a = rf["q"], rows["a"]
        Sm, Sl, Sml = S["Sm"], S["Sl"], S["Sml"]
        Smm, Sll = Sm - Sml, Sl - Sml  # Σ eμ², Σ eλ_l² (μ + λ_l = 1)
        dq = np.array([beta @ Sm, betas @ Sm, Sl.sum()])
        row_y = a * Smm + q[2] * Sml  # Σ eμ y per row, over β
        ey = np.array([beta @ row_y, betas @ row_y, a @ Sml + q[2] * Sll.sum()])  # Σ eλ_j y
        return {"s": q * dq - ey, "q": dq, "b0": np.array(dq.sum())}
    p, G, d = rf["p"], rf["G"], cfg.d
    Km, Kl, Kml = S["Km"], S["Kl"], S["Kml"]
    Kmm, Kll = Km - Kml, Kl - Kml
    dp = np.array([beta @ S["Pm"], betas @ S["Pm"], S["Pl"].sum()])
    M = np.empty((3, 3))
    M[0, 0], M[1, 1], M[0, 1] = (beta * beta) @ Kmm, (betas * betas) @ Kmm, (beta * betas) @ Kmm
    M[0, 2], M[1, 2], M[2, 2] = beta @ Kml, betas @ Kml, Kll.sum()
    M[1, 0], M[2, 0], M[2, 1] = M[0, 1], M[0, 2], M[1, 2]
    ds = p * dp - np.einsum("jk,jk->j", G, M) / d
    if cfg.eps:
        ds -= cfg.eps * np.array([beta @ Km, betas @ Km, Kl.sum()])
    return {"s": ds, "p": dp, "G": -M / (2 * d), "const": np.array(S["E"].sum())}


def _expand(rows: dict[str, np.ndarray], r0: int, r1: int, counts: np.ndarray, name: str) -> np.ndarray:
    """Row scalar ``name`` of rows ``r0..r1`` repeated over their pairs (``counts`` each): (B,)."""
    return np.repeat(rows[name][r0:r1], counts)


def _regression(cfg: ToyConfig, rf: dict, pairs: PairSet, loss: str, beta: float,
                chunk: int) -> tuple[float, dict[str, np.ndarray]]:
    rows = _rows(cfg, rf, pairs.n)
    W = pairs.total_weight()
    S: dict[str, Any] = {"Em": 0.0}
    blocks = []
    for r0, r1 in pairs.chunks(chunk):
        a, b = int(pairs.starts[r0]), int(pairs.starts[r1])
        counts = np.diff(pairs.starts[r0 : r1 + 1])
        blocks.append((r0, r1, a, b, counts, functools.partial(_expand, rows, r0, r1, counts)))
    weight = pairs.weight
    if loss == "mse":
        scale = 2.0 / W
    else:  # a first pass for the largest β r², which keeps the exponentials finite
        res = np.empty(len(pairs))
        for _, _, a, b, _, ex in blocks:
            res[a:b] = _chunk_forward(cfg, rf, ex, pairs.m[a:b])[0]
        if not np.all(np.isfinite(res)):
            return math.inf, {}
        shift = float(beta * np.max(res * res))
        if not math.isfinite(shift):
            return math.inf, {}
        weight = np.exp(beta * res * res - shift)
        if pairs.weight is not None:
            weight *= pairs.weight
        total = float(weight.sum())
        if not total > 0:
            return math.inf, {}
        scale = 2.0 / total
    sse = 0.0
    for r0, r1, a, b, counts, ex in blocks:
        m = pairs.m[a:b]
        r, ctx = _chunk_forward(cfg, rf, ex, m)
        e = r * scale
        if weight is not None:
            e *= weight[a:b]
        sse += float(e @ r)
        local = np.concatenate([[0], np.cumsum(counts[:-1])])
        for k, v in _chunk_backward(cfg, e, ctx, m, local).items():
            if k == "Em":
                S[k] += v
            else:
                S.setdefault(k, np.zeros(len(pairs.n)))[r0:r1] += v
    value = sse / 2.0 if loss == "mse" else (shift + math.log(total / W)) / beta
    if not math.isfinite(value):
        return math.inf, {}
    return value, _reduced_grad(cfg, rf, rows, pairs.n, S)


def residuals(cfg: ToyConfig, params: ToyParams, pairs: PairSet, chunk: int = CHUNK) -> np.ndarray:
    """Regression residuals ``ŷ − n`` at every pair of ``pairs``, in their order: (P,) float64."""
    if cfg.readout != "regression":
        raise ValueError("residuals exist for the regression read-out only")
    out = np.empty(len(pairs))
    with np.errstate(all="ignore"):
        rf, _ = _regression_form(cfg, {k: v.detach().cpu().numpy() for k, v in params.tensors().items()})
        rows = _rows(cfg, rf, pairs.n)
        for r0, r1 in pairs.chunks(chunk):
            a, b = int(pairs.starts[r0]), int(pairs.starts[r1])
            counts = np.diff(pairs.starts[r0 : r1 + 1])
            ex = functools.partial(_expand, rows, r0, r1, counts)
            out[a:b] = _chunk_forward(cfg, rf, ex, pairs.m[a:b])[0]
    return out


def worst_pairs(cfg: ToyConfig, params: ToyParams, L: int, k: int, chunk: int = CHUNK
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The ``k`` pairs of the full domain with the largest ``|ŷ − n|`` (regression), scanned in row chunks
    (memory O(chunk + k)). Returns ``n``, ``m``, ``|ŷ − n|`` (each (k',), worst first; NaN counts as inf) and
    the fraction of the domain counted exactly."""
    best_n, best_m, best_e = np.empty(0), np.empty(0), np.empty(0)
    exact, n0 = 0, 0
    while n0 <= L:
        n1 = n0 + 1
        while n1 <= L and (n1 - n0 + 1) * (L + 1 - n0) <= 8 * chunk:
            n1 += 1
        pairs = PairSet.full(L, n0, n1)
        err = np.abs(residuals(cfg, params, pairs, chunk))
        err[np.isnan(err)] = np.inf
        exact += int((err < 0.5).sum())
        pick = np.argpartition(-err, k)[:k] if len(err) > k else np.arange(len(err))
        n_all = np.repeat(pairs.n, np.diff(pairs.starts))
        best_n = np.concatenate([best_n, n_all[pick]])
        best_m = np.concatenate([best_m, pairs.m[pick]])
        best_e = np.concatenate([best_e, err[pick]])
        if len(best_e) > k:
            keep = np.argpartition(-best_e, k)[:k]
            best_n, best_m, best_e = best_n[keep], best_m[keep], best_e[keep]
        n0 = n1
    order = np.argsort(-best_e, kind="stable")
    return best_n[order], best_m[order], best_e[order], exact / ((L + 1) * (L + 2) // 2)


# --- classification ----------------------------------------------------------------------------------------


def _classification(cfg: ToyConfig, rf: dict[str, torch.Tensor], pairs: PairSet, ce_scale: float,
                    chunk: int) -> tuple[float, dict[str, torch.Tensor]]:
    """Cross-entropy through autograd over the reduced form, in chunks of pairs (O(L) per pair)."""
    leaves = {k: v.detach().requires_grad_(True) for k, v in rf.items()}
    grads = {k: torch.zeros_like(v) for k, v in rf.items()}
    K = rf["P"].shape[1]
    n_all, m_all = pairs.pairs()
    W = pairs.total_weight()
    per = max(1, (chunk * 32) // K)
    value = 0.0
    for a in range(0, len(pairs), per):
        n = torch.as_tensor(n_all[a : a + per])
        m = torch.as_tensor(m_all[a : a + per])
        counts = torch.stack([torch.ones_like(n), n, m], dim=1)  # (B, 3)
        if cfg.attention == "linear":
            lam = counts * leaves["s"]
        else:
            lam = torch.softmax(leaves["s"] + torch.log(counts), dim=1)  # (B, 3)
        S = lam @ leaves["P"]  # (B, K)
        if cfg.ln_place == "post":
            quad = ((lam @ leaves["G"]) * lam).sum(dim=1) / cfg.d + cfg.eps
            S = S / torch.sqrt(quad.clamp_min(0.0))[:, None]
        S = S + leaves["const"]
        ce = torch.nn.functional.cross_entropy(ce_scale * S, n.long(), reduction="none")  # (B,)
        if pairs.weight is not None:
            ce = ce * torch.as_tensor(pairs.weight[a : a + per])
        part = ce.sum() / W
        got = torch.autograd.grad(part, list(leaves.values()))
        for k, gk in zip(leaves, got, strict=True):
            grads[k] += gk
        value += float(part.detach())
    return value, grads


# --- the entry point -----------------------------------------------------------------------------------------


def loss_and_grad(cfg: ToyConfig, params: ToyParams, pairs: PairSet, loss: str = "mse", beta: float = 1.0,
                  ce_scale: float = 1.0, chunk: int = CHUNK) -> tuple[float, dict[str, torch.Tensor]]:
    """The loss over ``pairs`` and its gradient with respect to every trainable vector of ``params``.

    loss: ``"mse"`` or ``"max"`` (smooth maximum of the squared error at sharpness ``beta``) for regression;
    classification always uses cross-entropy on ``ce_scale ×`` the scores. Returns ``(value, grads)`` with
    ``grads[name]`` shaped like ``params.tensors()[name]``; ``value`` is ``inf`` (and ``grads`` empty) where
    the output is undefined or infinite.
    """
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
    if len(pairs) == 0:
        raise ValueError("the pair set is empty")
    if cfg.readout == "regression":
        arrays = {k: v.detach().cpu().numpy() for k, v in params.tensors().items()}
        with np.errstate(all="ignore"):  # overflow and 0/0 surface as an inf value below
            rf, ctx = _regression_form(cfg, arrays)
            value, g = _regression(cfg, rf, pairs, loss, beta, chunk)
            if not math.isfinite(value):
                return math.inf, {}
            grads = _regression_form_backward(cfg, arrays, ctx, g)
        if not all(np.all(np.isfinite(grads[k])) for k in arrays):  # a gradient beyond float64: no step there
            return math.inf, {}
        return value, {k: torch.as_tensor(np.asarray(grads[k], dtype=np.float64).reshape(arrays[k].shape))
                       for k in arrays}
    tensors = {k: v.detach().requires_grad_(True) for k, v in params.tensors().items()}
    with torch.enable_grad():
        rf = reduced_form(cfg, ToyParams(**tensors))
        value, g = _classification(cfg, rf, pairs, ce_scale, chunk)
        if not math.isfinite(value):
            return math.inf, {}
        keys = list(g)
        got = torch.autograd.grad([rf[k] for k in keys], list(tensors.values()),
                                  grad_outputs=[g[k] for k in keys], allow_unused=True)
    return value, {k: (torch.zeros_like(t) if gk is None else gk)
                   for (k, t), gk in zip(tensors.items(), got, strict=True)}


__all__ = ["PairSet", "reduced_form", "loss_and_grad", "residuals", "worst_pairs", "LOSSES", "CHUNK"]
