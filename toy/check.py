"""The full-domain check: does a toy model count rounding-exactly on every pair ``n + m <= L``?

Regression passes when ``max |ŷ(n, m) - n| < 1/2`` over all ``(L+1)(L+2)/2`` pairs; classification passes when
the true class wins at every pair (its smallest winning score gap is ``> 0``).

The fast path (regression) uses that the attention output is always ``o = λ_b z_b + λ_s z_s + λ_l z_l``:

- without post-LN, ``ŷ = λ·q + b0`` with ``q = Z w`` (three numbers per model);
- with post-LN, ``ŷ = λ·p / sqrt(λᵀ G λ / d + eps) + const`` with ``Zc`` the centred token vectors,
  ``p = Zc (w ⊙ γ)``, ``G = Zc Zcᵀ`` and ``const = w·β + b0``.

Within one row ``n`` the softmax weights are ``(e_b, e_s, m e_l)`` up to a common factor, so a row costs three
exponentials and every pair a handful of multiply-adds, independent of ``d``. The common factor is the row's
largest weight, which keeps scores of 1e8 finite; the ``m = 0`` column, whose largest weight can be far smaller
than the row's, is evaluated on its own. Rows are processed in chunks of at most ``chunk`` pairs, so
``L = 10,000`` (5·10^7 pairs) never holds more than a chunk in memory. Classification has no such reduction
(one score per class); its reduced form ``λ·P_k / norm(λ) + const_k`` with ``P`` (3, L+1) still drops the
factor d. ``method="model"`` runs :func:`countlens.toy.model.count_error` in chunks instead (the reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from countlens.core.errors import ConfigError
from countlens.toy.model import DTYPE, ToyConfig, ToyParams, count_error, token_vectors

DEFAULT_CHUNK = 1 << 20  # pairs held at once: 8 MiB per float64 buffer


@dataclass
class CheckResult:
    """Outcome of :func:`full_domain_check`.

    passed: every pair counts correctly. worst_error: regression ``max |ŷ - n|`` (passes iff < 1/2);
    classification the largest negated winning gap (passes iff < 0). worst_pair: the ``(n, m)`` attaining it.
    max_norm: the largest per-vector norm (the ``B`` these parameters need); norms: each vector's norm.
    """

    passed: bool
    worst_error: float
    worst_pair: tuple[int, int]
    max_norm: float
    norms: dict[str, float]
    L: int = 0
    pairs: int = 0
    readout: str = "regression"
    min_gap: float | None = None  # classification: smallest winning score gap over the domain
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "passed": self.passed, "worst_error": self.worst_error, "worst_pair": list(self.worst_pair),
            "max_norm": self.max_norm, "norms": self.norms, "L": self.L, "pairs": self.pairs,
            "readout": self.readout, "min_gap": self.min_gap,
        }


def n_pairs(L: int) -> int:
    """Number of admissible pairs ``(L+1)(L+2)/2``."""
    return (L + 1) * (L + 2) // 2


def reduced_form(cfg: ToyConfig, p: ToyParams) -> dict[str, np.ndarray | float]:
    """The three-scalar description of a regression model (see module docstring), float64 numpy.

    Returns ``s`` (3,) scores ``τ z_b·z_t``; ``q`` (3,) read-out of each token vector (``p`` in the post-LN
    formula); ``G`` (3, 3) Gram matrix of the centred token vectors (post-LN only) and ``const``.
    """
    if cfg.readout != "regression":
        raise ValueError("the reduced form exists for the regression read-out only")
    with torch.no_grad():
        z = token_vectors(cfg, p).detach().cpu().numpy().astype(np.float64)  # (3, d)
        w = p.w.detach().cpu().numpy().astype(np.float64)  # (d,)
        b0 = float(p.b0)
        s = cfg.tau * (z @ z[0])  # (3,)
        out: dict[str, np.ndarray | float] = {"s": s}
        if cfg.ln_place == "post":
            zc = z - z.mean(axis=1, keepdims=True)  # (3, d)
            if cfg.ln_learned:
                gamma = p.gamma.detach().cpu().numpy()
                beta = p.beta.detach().cpu().numpy()
                out.update(q=zc @ (w * gamma), const=float(w @ beta) + b0)
            else:
                out.update(q=zc @ w, const=b0)
            out["G"] = zc @ zc.T  # (3, 3)
        else:
            out.update(q=z @ w, const=b0)
    return out


def _row_weights(s: np.ndarray, n: np.ndarray, m_max: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per-row softmax weights ``e_b, e_s, e_l`` (pair weights are ``e_b, e_s, m e_l``) scaled by the row's
    largest weight over ``m <= m_max``. n, m_max: (R,) float. Returns three (R,) arrays."""
    with np.errstate(divide="ignore"):
        log_n = np.log(n)  # log 0 = -inf: no counted tokens
        log_m = np.log(m_max)
    ls = s[1] + log_n
    ll = s[2] + log_m
    r = np.maximum(np.maximum(s[0], ls), ll)  # (R,)
    eb = np.exp(s[0] - r)
    es = np.exp(ls - r)
    el = np.exp(s[2] - r)
    return eb, es, el


def _column_m0(cfg: ToyConfig, rf: dict, L: int) -> np.ndarray:
    """|ŷ(n, 0) - n| for n = 0..L: (L+1,)."""
    n = np.arange(L + 1, dtype=np.float64)
    s, q = rf["s"], rf["q"]
    if cfg.attention == "linear":
        yhat = s[0] * q[0] + n * s[1] * q[1] + rf["const"]
        return np.abs(yhat - n)
    eb, es, _ = _row_weights(s, n, np.zeros_like(n))
    num = eb * q[0] + es * q[1]
    if cfg.ln_place == "post":
        G = rf["G"]
        quad = eb * eb * G[0, 0] + 2 * eb * es * G[0, 1] + es * es * G[1, 1]
        den = eb + es
        yhat = num / np.sqrt(np.maximum(quad, 0.0) / cfg.d + cfg.eps * den * den) + rf["const"]
    else:
        yhat = num / (eb + es) + rf["const"]
    return np.abs(yhat - n)


def _block(cfg: ToyConfig, rf: dict, L: int, n0: int, n1: int) -> np.ndarray:
    """|ŷ - n| on rows n0 <= n < n1, columns m = 1..L-n0; entries with n + m > L are -1. (R, M)."""
    n = np.arange(n0, n1, dtype=np.float64)  # (R,)
    m = np.arange(1, L - n0 + 1, dtype=np.float64)  # (M,)
    s, q, const = rf["s"], rf["q"], rf["const"]
    if cfg.attention == "linear":
        row = s[0] * q[0] + n * (s[1] * q[1] - 1.0) + const  # (R,)  ŷ - n without the distractor term
        err = np.abs(row[:, None] + m[None, :] * (s[2] * q[2]))
    else:
        eb, es, el = _row_weights(s, n, L - n)
        num0 = (eb * q[0] + es * q[1])[:, None]  # (R, 1)
        numl = (el * q[2])[:, None]
        err = m[None, :] * numl  # (R, M)
        err += num0
        if cfg.ln_place == "post":
            G = rf["G"]
            q0 = (eb * eb * G[0, 0] + 2 * eb * es * G[0, 1] + es * es * G[1, 1])[:, None]
            q1 = (2 * el * (eb * G[0, 2] + es * G[1, 2]))[:, None]
            q2 = (el * el * G[2, 2])[:, None]
            quad = m[None, :] * q2
            quad += q1
            quad *= m[None, :]
            quad += q0
            quad *= 1.0 / cfg.d
            if cfg.eps:
                den = m[None, :] * el[:, None] + (eb + es)[:, None]
                quad += cfg.eps * den * den
            np.maximum(quad, 0.0, out=quad)
            np.sqrt(quad, out=quad)
        else:
            quad = m[None, :] * el[:, None]
            quad += (eb + es)[:, None]
        err /= quad
        err += (const - n)[:, None]
        np.abs(err, out=err)
    invalid = m[None, :] > (L - n)[:, None]
    err[invalid] = -1.0
    return err


def _check_regression(cfg: ToyConfig, p: ToyParams, L: int, chunk: int) -> tuple[float, tuple[int, int]]:
    with np.errstate(all="ignore"):  # 0/0 and overflow become NaN/inf, which count as failures below
        return _scan_rows(cfg, reduced_form(cfg, p), L, chunk)


def _scan_rows(cfg: ToyConfig, rf: dict, L: int, chunk: int) -> tuple[float, tuple[int, int]]:
    col = _column_m0(cfg, rf, L)
    if np.isnan(col).any():  # e.g. post-LN of a constant vector: undefined, so not counting
        return math.inf, (int(np.flatnonzero(np.isnan(col))[0]), 0)
    k = int(np.argmax(col))
    worst, pair = float(col[k]), (k, 0)
    n0 = 0
    while n0 < L:  # rows 0..L-1 have m >= 1 pairs
        width = L - n0
        rows = max(1, min(L - n0, chunk // width))
        blk = _block(cfg, rf, L, n0, n0 + rows)
        flat = int(blk.argmax())  # argmax stops at the first NaN, if any
        i, j = divmod(flat, blk.shape[1])
        if np.isnan(blk[i, j]):
            return math.inf, (n0 + i, j + 1)
        if blk[i, j] > worst:
            worst, pair = float(blk[i, j]), (n0 + i, j + 1)
        n0 += rows
    return worst, pair


def _classification_form(cfg: ToyConfig, p: ToyParams) -> dict:
    """Classification in reduced form: class scores ``λ·P_k / norm(λ) + const_k`` with ``P`` (3, L+1)."""
    with torch.no_grad():
        z = token_vectors(cfg, p).detach().cpu().numpy().astype(np.float64)  # (3, d)
        U = p.U.detach().cpu().numpy().astype(np.float64)  # (K, d)
        c = p.c.detach().cpu().numpy().astype(np.float64)  # (K,)
        out = {"s": cfg.tau * (z @ z[0])}
        if cfg.ln_place == "post":
            zc = z - z.mean(axis=1, keepdims=True)
            if cfg.ln_learned:
                gamma, beta = p.gamma.detach().cpu().numpy(), p.beta.detach().cpu().numpy()
                out.update(P=zc @ (U * gamma).T, const=U @ beta + c)
            else:
                out.update(P=zc @ U.T, const=c)
            out["G"] = zc @ zc.T
        else:
            out.update(P=z @ U.T, const=c)
    return out


def _mixing(cfg: ToyConfig, s: np.ndarray, n: np.ndarray, m: np.ndarray) -> np.ndarray:
    """λ per pair, (P, 3): the numpy twin of ``model.mixing_weights``."""
    counts = np.stack([np.ones_like(n), n, m], axis=1)
    if cfg.attention == "linear":
        return counts * s
    with np.errstate(divide="ignore"):
        logits = s + np.log(counts)
    logits -= logits.max(axis=1, keepdims=True)
    w = np.exp(logits)
    return w / w.sum(axis=1, keepdims=True)


def _check_classification(cfg: ToyConfig, p: ToyParams, L: int, chunk: int) -> tuple[float, tuple[int, int]]:
    """Negated smallest winning gap over the domain and its pair; O(L) per pair instead of O(d L)."""
    rf = _classification_form(cfg, p)
    P, const = rf["P"], rf["const"]
    K = P.shape[1]
    per = max(1, chunk // K)  # pairs per block
    worst, pair = -math.inf, (0, 0)
    rows = np.arange(L + 2)
    offsets = rows * (L + 1) - rows * (rows - 1) // 2  # index of pair (n, 0) in row-major order
    total = int(offsets[-1])
    with np.errstate(all="ignore"):
        for start in range(0, total, per):
            i = np.arange(start, min(start + per, total))
            idx = np.searchsorted(offsets, i, side="right") - 1  # (B,) the count n = the true class
            n = idx.astype(np.float64)
            m = (i - offsets[idx]).astype(np.float64)
            lam = _mixing(cfg, rf["s"], n, m)  # (B, 3)
            S = lam @ P  # (B, K)
            if cfg.ln_place == "post":
                quad = np.einsum("bi,ij,bj->b", lam, rf["G"], lam) / cfg.d + cfg.eps
                S /= np.sqrt(np.maximum(quad, 0.0))[:, None]
            S += const
            b = np.arange(len(i))
            true = S[b, idx].copy()
            S[b, idx] = -np.inf
            err = S.max(axis=1) - true  # negated winning gap
            err[np.isnan(err)] = np.inf
            k = int(err.argmax())
            if err[k] > worst:
                worst, pair = float(err[k]), (int(n[k]), int(m[k]))
    return worst, pair


def _check_by_model(cfg: ToyConfig, p: ToyParams, L: int, chunk: int) -> tuple[float, tuple[int, int]]:
    """Any read-out, through ``model.count_error`` on chunks of rows (O(d) or O(d L) per pair)."""
    worst, pair = -math.inf, (0, 0)
    per_pair = (L + 2) if cfg.readout == "classification" else 1
    n0 = 0
    with torch.no_grad():
        while n0 <= L:
            rows = max(1, min(L + 1 - n0, chunk // (per_pair * (L + 1 - n0))))
            ns, ms = [], []
            for n in range(n0, n0 + rows):
                ms.append(torch.arange(L - n + 1, dtype=DTYPE))
                ns.append(torch.full((L - n + 1,), float(n), dtype=DTYPE))
            n_t, m_t = torch.cat(ns), torch.cat(ms)
            err = count_error(cfg, p, n_t, m_t)  # (P,)
            err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
            k = int(err.argmax())
            if float(err[k]) > worst:
                worst, pair = float(err[k]), (int(n_t[k]), int(m_t[k]))
            n0 += rows
    return worst, pair


def full_domain_check(cfg: ToyConfig, params: ToyParams, L: int | None = None, chunk: int = DEFAULT_CHUNK,
                      method: str = "auto") -> CheckResult:
    """Check rounding-exact counting on every pair ``n, m >= 0, n + m <= L`` (``L`` defaults to ``cfg.L``).

    method: ``"fast"`` (reduced form: O(1) per pair for regression, O(L) for classification), ``"model"``
    (chunked ``model.count_error``, O(d) or O(d L) per pair) or ``"auto"`` (= fast). Memory is O(chunk).
    """
    L = int(cfg.L if L is None else L)
    if L < 1:
        raise ConfigError("L", f"{{L}} must be >= 1, got {L}")
    if cfg.readout == "classification":
        rows = params.U.shape[0]
        if rows != L + 1:
            raise ConfigError("L", f"a classifier with {rows} classes counts 0..{rows - 1}: check it at {{L:{rows - 1}}}")
    if method not in ("auto", "fast", "model"):
        raise ValueError(f"unknown method {method!r}")
    if method == "model":
        check = _check_by_model
    else:
        check = _check_regression if cfg.readout == "regression" else _check_classification
    worst, pair = check(cfg, params, L, max(int(chunk), 1))
    norms = params.vector_norms()
    if cfg.readout == "regression":
        passed, gap = bool(worst < 0.5), None
    else:
        passed, gap = bool(worst < 0.0), -worst
    return CheckResult(passed=passed, worst_error=worst, worst_pair=pair, max_norm=max(norms.values()),
                       norms=norms, L=L, pairs=n_pairs(L), readout=cfg.readout, min_gap=gap)


__all__ = ["CheckResult", "full_domain_check", "reduced_form", "n_pairs", "DEFAULT_CHUNK"]
