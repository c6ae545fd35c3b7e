"""The classification read-out: a bounded-norm construction, its winning score gaps, and its storage cost.

**Construction.** In every softmax variant the boundary output is a mixture
``o = λ_b z_b + λ_s z_s + λ_l z_l`` whose weights satisfy ``λ_s / λ_b = n / a`` with ``a = exp(s_b − s_s)``
fixed by the embeddings — a constant, not a function of ``L``. Put the three token vectors on a triangle in a
plane of mean-zero directions; then ``λ_b`` and ``λ_s`` are affine functions of ``o`` (barycentric
coordinates), and *linear* ones when ``z_l = 0``. The "tangent" trick turns the ratio into a linear score:

    score_k = 2 (k/L)(a/L) λ_s − (k/L)² λ_b = λ_b (a/L)² [2 t_k t − t_k²],   t = n/a, t_k = k/a,

and ``2 t_k t − t_k² = t² − (t − t_k)²`` is largest at ``k = n``. Its winning gap is ``λ_b / L²`` (the
neighbour ``k = n ± 1`` is the runner-up), positive on the whole domain, and every coefficient is at most
``max(1, 2a/L)`` times a fixed dual vector — bounded independently of ``L``. Post-LN rescales ``o`` by the
positive factor ``√d/|o|`` (the triangle is mean-zero and ``z_l = 0`` makes the scores homogeneous), which
does not move an argmax, so the same class vectors work with bias-free scores. Linear attention has
``o = τ(1 + n) q`` along one direction, so ``n`` itself is affine in ``h``: ``score_k = (n² − (n − k)²)/L²``,
gap ``1/L²``.

The read-out rows come out at most ``√(1 + 4a²/L²)`` long; dividing every score by one positive constant
(which moves no argmax) brings them to <= 1. Embeddings are unit vectors — LN is scale-invariant, so even
bare pre-LN needs no longer ones — and a learned gain is ``1/√d`` per entry: **every trainable vector has
norm <= 1, at every L** (:func:`classifier_norm_bound`; the tests check it and the full-domain pass).

**Costs.** The classifier stores ``L + 1`` class vectors and biases: ``(L + 1)(d + 1)`` read-out parameters
against the regression head's ``d + 1`` (:func:`storage_cost`). Its price is the shrinking winning score gap
(Figure 2c), which :func:`min_gap_by_count` computes per count ``n`` (minimum over letter counts ``m``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from countlens.core.errors import ConfigError
from countlens.toy import model
from countlens.toy.model import DTYPE, ToyConfig, ToyParams


def _mean_zero_basis(d: int) -> torch.Tensor:
    """Two orthonormal vectors with zero mean (rows): (2, d). LN leaves mean-zero vectors' direction alone."""
    if d < 3:
        raise ConfigError("d", f"the classification construction needs {{d}} >= 3 (two mean-zero directions), got {d}")
    q1 = torch.zeros(d, dtype=DTYPE)
    q1[0], q1[1] = 1.0, -1.0
    q2 = torch.zeros(d, dtype=DTYPE)
    q2[0], q2[1], q2[2] = 1.0, 1.0, -2.0
    return torch.stack([q1 / math.sqrt(2.0), q2 / math.sqrt(6.0)])  # (2, d)


def classifier_construction(cfg: ToyConfig) -> ToyParams:
    """Bounded-norm classification parameters for ``cfg`` (any variant, ``d >= 3``, ``L + 1`` classes).

    Returns ToyParams with ``x_b, x_s, x_l`` (d,), ``U`` (L+1, d), ``c`` (L+1,), and ``gamma, beta`` where
    LN is learned; counts exactly on the full domain (see the module docstring for the derivation). Every
    trainable vector has norm <= 1 for every ``L`` (:func:`classifier_norm_bound`).
    """
    d, L = cfg.d, cfg.L
    Q = _mean_zero_basis(d)  # (2, d)
    k = torch.arange(L + 1, dtype=DTYPE) / L  # (L+1,)  k/L
    if cfg.attention == "linear":
        # z_b = z_s ∝ q1 and z_l ∝ q2 ⟂ z_b (so s_l = 0): o = s_s (1 + n) z_s, and n is affine in o·q1.
        p = ToyParams(x_b=Q[0].clone(), x_s=Q[0].clone(), x_l=Q[1].clone())
        z = model.token_vectors(cfg, p)  # (3, d)
        slope = float(cfg.tau * (z[0] @ z[1]) * (z[1] @ Q[0]))  # o·q1 = slope (1 + n)
        # score_k = 2(k/L)(n/L) − (k/L)² with n = o·q1 / slope − 1
        p.U = (2 * k / (L * slope))[:, None] * Q[0][None, :]  # (L+1, d)
        p.c = -2 * k / L - k * k  # (L+1,)
        return _unit_readout(p)
    if cfg.ln_place == "pre":  # LN(0) is undefined, so z_l must be a third vertex, not the origin
        x = torch.stack([Q[0], Q[1], -Q[0]])  # (3, d)
    else:  # z_l = 0 keeps the scores bias-free, which post-LN's positive rescaling cannot disturb
        x = torch.stack([Q[0], Q[1], torch.zeros(d, dtype=DTYPE)])  # (3, d)
    p = ToyParams(x_b=x[0].clone(), x_s=x[1].clone(), x_l=x[2].clone())
    if cfg.ln_learned:
        # γ = 1/√d undoes LN's √d on unit mean-zero vectors (pre-LN: z = x; post-LN: h = o/|o|).
        p.gamma = torch.full((d,), 1.0 / math.sqrt(d), dtype=DTYPE)
        p.beta = torch.zeros(d, dtype=DTYPE)
    z = model.token_vectors(cfg, p)  # (3, d), in the plane of Q
    s = cfg.tau * (z @ z[0])  # (3,)
    a = math.exp(float(s[0] - s[1]))  # λ_s / λ_b = n / a
    # Barycentric coordinates: (o·q1, o·q2, 1) = T λ, T's columns (z_t·q1, z_t·q2, 1), so λ = T⁻¹ (...).
    T = torch.cat([(z @ Q.T).T, torch.ones(1, 3, dtype=DTYPE)])  # (3, 3)
    Tinv = torch.linalg.inv(T)  # rows give λ_b, λ_s, λ_l
    lin = (2 * k * (a / L))[:, None] * Tinv[1] - (k * k)[:, None] * Tinv[0]  # (L+1, 3)
    p.U = lin[:, :2] @ Q  # (L+1, d)
    p.c = lin[:, 2].clone()  # (L+1,)
    if cfg.ln_place == "post":  # z_l = 0 makes λ_b, λ_s linear in o: the biases vanish up to rounding
        p.c.zero_()
    return _unit_readout(p)


def _unit_readout(p: ToyParams) -> ToyParams:
    """Divide all class scores by one positive constant so every row of U and every c_k is at most 1."""
    s = max(1.0, float(torch.linalg.vector_norm(p.U, dim=1).max()), float(p.c.abs().max()))
    p.U, p.c = p.U / s, p.c / s
    return p


def classifier_norm_bound(cfg: ToyConfig) -> float:
    """The per-vector norm bound that :func:`classifier_construction` meets at every ``L``: 1.

    Embeddings are unit vectors (LN is scale-invariant, so bare pre-LN needs no larger ones), a learned
    gain is ``1/√d`` per entry, and the read-out is divided by its largest row norm when that exceeds 1.
    """
    return 1.0


def min_gap_by_count(cfg: ToyConfig, p: ToyParams, chunk: int = 2_000_000) -> np.ndarray:
    """Smallest winning score gap per count: ``g[n] = min_m gap(n, m)`` over ``m = 0..L−n``: (L+1,).

    Positive everywhere iff the classifier counts exactly. Evaluated in chunks of about ``chunk`` scores, so
    ``L = 1,000`` (5·10⁵ pairs × 1,001 classes) never holds the whole score matrix.
    """
    L = cfg.L
    if cfg.readout != "classification":
        raise ConfigError("readout", "winning score gaps need the classification {readout} (U, c)")
    out = np.full(L + 1, np.inf)
    rows = max(1, chunk // (L + 1))  # pairs per chunk
    n_all, m_all = model.full_domain(L)  # (P,), (P,)
    with torch.no_grad():
        for start in range(0, len(n_all), rows):
            n, m = n_all[start : start + rows], m_all[start : start + rows]
            gap = model.winning_gap(model.forward(cfg, p, n, m), n)  # (rows,)
            np.minimum.at(out, n.long().numpy(), gap.numpy())
    return out


def storage_cost(d: int, L: int, ln_learned: bool = False) -> dict[str, int]:
    """Stored parameters: read-out alone and whole model, for both heads.

    Regression head: ``w`` and ``b0`` (``d + 1``). Classifier: ``U`` and ``c`` (``(L + 1)(d + 1)``). Both
    share ``3d`` embedding entries (``+ 2d`` for a learned LN's ``γ, β``).
    """
    shared = 3 * d + (2 * d if ln_learned else 0)
    reg, cls = d + 1, (L + 1) * (d + 1)
    return {"regression_readout": reg, "classification_readout": cls,
            "regression_total": shared + reg, "classification_total": shared + cls,
            "ratio_readout": cls / reg}


def arc_angle(cfg: ToyConfig, p: ToyParams) -> float:
    """Angular extent (radians) of the count representations on the letter-free slice.

    The largest angle between two of ``h(n, 0)``, ``n = 0..L``, measured on the mean-centred attention
    output (what post-LN normalises onto a sphere; for the other variants centring removes the common
    offset that LN would remove too). Figure 2b's number: the paper saw 2e-4 rad (regression) vs 1.7 rad.
    """
    with torch.no_grad():
        n = torch.arange(cfg.L + 1, dtype=DTYPE)
        o = model.attention_output(cfg, p, n, torch.zeros_like(n))  # (L+1, d)
        v = o - o.mean(dim=1, keepdim=True)
        v = v / torch.linalg.vector_norm(v, dim=1, keepdim=True).clamp_min(1e-300)
        cos = (v @ v.T).clamp(-1.0, 1.0)  # (L+1, L+1)
        return float(torch.arccos(cos.min()))


__all__ = ["classifier_construction", "classifier_norm_bound", "min_gap_by_count", "storage_cost", "arc_angle"]
