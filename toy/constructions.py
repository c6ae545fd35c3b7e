"""Explicit parameters that count rounding-exactly, for every variant and any ``(L, d)``.

Every construction works in a few orthonormal directions of R^d (``u, v, t`` below, centred so that LayerNorm
acts on them as a rescaling) and is fixed by a handful of *free scalars*. On the letter-free slice ``m = 0``
the read-out is an affine function of one known shape ``f(n)``, so its scale ``K`` and bias ``b0`` are set by a
Chebyshev (minimax) fit of ``n`` by ``K f(n) + b0``; the free scalars trade that fit's error against the
norms. Distractors are suppressed by a score gap (``c = e^{s_l - s_s}`` tiny). Nothing is accepted on faith:
:func:`best_construction` runs the full-domain check and tightens the slice target until it passes.

Families (``a = e^{s_b - s_s}``; ``K`` the read-out scale; ``B`` the largest per-vector norm):

- ``linear``: ``z_b = z_s = a e1``, ``z_l ⟂ z_b`` so distractors get score 0; ``ŷ = n`` exactly, B = O(1).
- ``linear-preln-bare``: the same with LN'd tokens on the sphere of radius sqrt(d), ``w ⟂ z_b``, b0 = 0:
  ``B = 2 / d`` at ``τ = 1/sqrt(d)``.
- ``softmax``: ``z_l = -ζ u`` far below ``z_s`` in score. ``ŷ = b0' + D n / (a + n)``: exact rounding needs
  ``a ≳ L²/4`` (cheap, a log-scale score gap) and ``D ≈ a + L`` (expensive, a product ``|w| |z_s|``), so
  ``B ≈ sqrt(D) ≈ L / 2``.
  Free scalars: ``a`` and the read-out tilt ``phi`` toward ``-z_b`` (trades ``D`` against ``b0``).
- ``softmax-preln-learned``: the LN bias ``β`` moves the sphere so that ``z_b`` is small while
  ``z_s - z_b`` has length ``sqrt(2) |γ|``; same Möbius read-out, ``B ≈ sqrt(D / sqrt 2)``.
  Free scalars: ``a``, ``theta`` (tilts ``ẑ_s`` toward ``ẑ_b`` to suppress distractors further) and
  ``phi`` (tilts ``w`` toward ``-u``, up to ``sqrt 2`` more read-out per norm, paid in distractor suppression).
- ``softmax-postln-bare``: ``z_l = 0``, so a distractor only rescales ``o``, which LN forgets (eps = 0).
  LN maps the numerator ``a β u + n (κ u + v) β`` onto an arc; the angle's sine,
  ``f = x / sqrt((1 + κx)² + x²)`` with ``x = n ρ``, is read by ``w = K/sqrt(d) v``. Linear to 1/2 over L
  counts needs ``ρ ~ L^{-3/2}``, so ``K ~ L^{3/2}``. Free scalars: ``rho`` and ``kappa`` (the counted token's
  component along ``z_b``, which adds a quadratic term that cancels part of the arc's cubic).
- ``softmax-postln-learned``: the same arc read through ``w ⊙ γ = W G e1``: ``K = W G sqrt(d - 1)``, so
  ``B = sqrt(K / sqrt(d-1)) ~ L^{3/4}``.
- ``softmax-preln-bare``: tokens on the sphere, so ``a <= e^{2 τ d}``; free scalars ``theta`` (angle of
  ``z_s`` from ``z_b``) and ``chi`` (of ``z_l``); the read-out ``(w, b0)`` is the full-domain Chebyshev LP.
  Feasible only up to ``L_cap(d)`` (see :mod:`countlens.toy.budget`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from countlens.core.errors import ConfigError, UsageError
from countlens.toy.check import CheckResult, full_domain_check
from countlens.toy.model import DTYPE, VARIANTS, ToyConfig, ToyParams, full_domain, mixing_weights

FREE_SCALARS = {
    "linear": ("a",),
    "linear-preln-bare": ("r",),
    "softmax": ("a", "phi"),
    "softmax-preln-learned": ("a", "theta", "phi"),
    "softmax-postln-bare": ("rho", "kappa"),
    "softmax-postln-learned": ("rho", "kappa"),
    "softmax-preln-bare": ("theta", "chi"),
}
SLICE_TARGET = 0.49  # first target for the letter-free slice; tightened when distractors cost more


def min_dimension(variant: str) -> int:
    """Smallest ``d`` a construction of ``variant`` needs (LayerNorm needs two centred directions)."""
    return 2 if variant in ("linear", "softmax") else 3


def validate(variant: str, L: int, d: int) -> None:
    """Raise :class:`~countlens.core.errors.ConfigError` (of the field ``variant``, ``L`` or ``d``) for an
    unknown variant, ``L < 1`` or a too small ``d``."""
    if variant not in VARIANTS:
        raise ConfigError("variant", f"{{variant}} must be one of {', '.join(VARIANTS)}; got {variant!r}")
    if int(L) < 1:
        raise ConfigError("L", f"{{L}} must be >= 1, got {L}")
    need = min_dimension(variant)
    if int(d) < need:
        raise ConfigError("d", f"{{d}} must be >= {need} for {variant} (LayerNorm needs two centred directions)")


def directions(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Orthonormal ``v, u, t`` in R^d, centred (orthogonal to the all-ones vector) when ``d >= 3``.

    ``v`` is the centred ``e1`` (so ``v·e1 = sqrt(1 - 1/d)``), ``u = (e2 - e3)/sqrt 2`` is orthogonal to
    ``e1``, ``t = (e2 + e3 - 2 e4)/sqrt 6`` exists for ``d >= 4``. For ``d = 2``: ``v = e1``, ``u = e2``.
    """
    if d == 2:
        return np.array([1.0, 0.0]), np.array([0.0, 1.0]), None
    v = -np.ones(d) / d
    v[0] += 1.0
    v /= np.linalg.norm(v)
    u = np.zeros(d)
    u[1], u[2] = 1.0, -1.0
    u /= math.sqrt(2.0)
    t = None
    if d >= 4:
        t = np.zeros(d)
        t[1], t[2], t[3] = 1.0, 1.0, -2.0
        t /= math.sqrt(6.0)
    return v, u, t


def chebyshev_fit(f: np.ndarray, n: np.ndarray) -> tuple[float, float, float]:
    """Best ``K, b0`` minimising ``max |K f + b0 - n|`` over the given points, and that error E.

    f, n: (P,). ``E(K) = (max(Kf - n) - min(Kf - n)) / 2`` is convex and piecewise linear in K, so a golden
    section search finds its minimum; ``b0`` centres the residual.
    """
    span = float(f.max() - f.min())
    if span <= 0 or not np.isfinite(span):
        return 0.0, float(-(n.max() + n.min()) / 2), float((n.max() - n.min()) / 2)

    def err(k: float) -> float:
        r = k * f - n
        return float(r.max() - r.min()) / 2

    k0 = float(n.max() - n.min()) / span
    lo, hi = 0.0, 4.0 * k0
    g = (math.sqrt(5.0) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    e1, e2 = err(x1), err(x2)
    for _ in range(64):
        if e1 <= e2:
            hi, x2, e2 = x2, x1, e1
            x1 = hi - g * (hi - lo)
            e1 = err(x1)
        else:
            lo, x1, e1 = x1, x2, e2
            x2 = lo + g * (hi - lo)
            e2 = err(x2)
    k = (lo + hi) / 2
    r = k * f - n
    return k, float(-(r.max() + r.min()) / 2), float(r.max() - r.min()) / 2


def _bisect_log(ok: Callable[[float], bool], lo: float, hi: float, want_large: bool, iters: int = 44) -> float:
    """Bisection on a log scale between ``lo`` and ``hi`` (``ok(lo) != ok(hi)``): the boundary value, on the
    ``ok`` side."""
    a, b = math.log(lo), math.log(hi)
    for _ in range(iters):
        mid = (a + b) / 2
        if ok(math.exp(mid)) == want_large:
            a = mid
        else:
            b = mid
    return math.exp(a if want_large else b)


SLICE_POINTS = 4001  # beyond this many counts the slice fit uses a grid (the full check has the last word)


def slice_counts(L: int) -> np.ndarray:
    """Counts the letter-free slice fit uses: all of ``0..L``, or ``SLICE_POINTS`` of them (ends included)
    where L is large; the residuals are smooth in n, and every result is verified on the full domain."""
    if L + 1 <= SLICE_POINTS:
        return np.arange(L + 1, dtype=np.float64)
    return np.unique(np.round(np.linspace(0.0, L, SLICE_POINTS)))


# ---- the letter-free slice shapes ------------------------------------------------------------------------


def mobius_shape(a: float, n: np.ndarray) -> np.ndarray:
    """Softmax without post-LN on ``m = 0``: ``ŷ - b0' = D f(n)`` with ``f = n / (a + n)``."""
    return n / (a + n)


def arc_shape(rho: float, kappa: float, n: np.ndarray) -> np.ndarray:
    """Post-LN on ``m = 0``: the sine of the arc angle, ``x / sqrt((1 + κx)² + x²)``, ``x = ρ n``;
    NaN where ``1 + κx <= 0`` (the arc would pass the pole)."""
    x = rho * n
    den = 1.0 + kappa * x
    out = x / np.sqrt(den * den + x * x)
    out[den <= 0] = np.nan
    return out


@functools.lru_cache(maxsize=256)
def smallest_a(L: int, target: float) -> float:
    """Smallest ``a >= 1`` whose Möbius fit on ``n = 0..L`` has error <= target."""
    n = slice_counts(L)

    def ok(a: float) -> bool:
        return chebyshev_fit(mobius_shape(a, n), n)[2] <= target

    if ok(1.0):
        return 1.0
    hi = 4.0 * (L + 2) ** 2
    while not ok(hi):
        hi *= 4
    return _bisect_log(ok, 1.0, hi, want_large=False)


def largest_rho(L: int, kappa: float, target: float) -> float:
    """Largest ``ρ`` whose arc fit on ``n = 0..L`` (with tilt κ) has error <= target."""
    n = slice_counts(L)

    def ok(rho: float) -> bool:
        f = arc_shape(rho, kappa, n)
        return bool(np.all(np.isfinite(f))) and chebyshev_fit(f, n)[2] <= target

    hi = 1.0 / max(L, 2)  # ρ < 1 keeps a = 1/ρ > 1
    if ok(hi):
        return hi
    lo = hi
    while not ok(lo):
        lo /= 4
    return _bisect_log(ok, lo, hi, want_large=True)


# ---- one function per family: (L, d, tau, target, **free) -> ToyParams ----------------------------------


def _t(x: np.ndarray | float) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=DTYPE)


def _linear(L: int, d: int, tau: float, target: float, a: float | None = None) -> ToyParams:
    v, u, _ = directions(d)
    a = (1.0 / tau) ** 0.25 if a is None else float(a)
    # o = τ a² (1 + n) z_b with z_b = a v; distractors score τ z_b·z_l = 0
    return ToyParams(x_b=_t(a * v), x_s=_t(a * v), x_l=_t(a * u), w=_t(v / (tau * a**3)), b0=_t(-1.0))


def _linear_preln_bare(L: int, d: int, tau: float, target: float, r: float | None = None) -> ToyParams:
    v, u, _ = directions(d)
    # z_b = sqrt(d) v, z_s at 45° toward u, z_l = sqrt(d) u ⟂ z_b; w along u reads n s_s (z_s·u)
    omega = 2.0 / (tau * d**1.5)
    r = omega if r is None else float(r)  # LN forgets the input scale: any positive norm works
    return ToyParams(x_b=_t(r * v), x_s=_t(r * (v + u) / math.sqrt(2)), x_l=_t(r * u), w=_t(omega * u),
                     b0=_t(0.0))


def _suppression(L: int, beta: float, tau: float, delta: float, ratio: bool) -> float:
    """Smallest ``ζ`` (length of ``z_l = -ζ u``) with ``(L²/4) (c/a) (ζ/β if ratio) <= delta``, where
    ``c / a = e^{-τ β (ζ + β)}``: the distractors' worst shift of the read-out stays below ``delta``."""
    if beta <= 0:
        return 0.0
    goal = math.log(4.0 * delta / max(L, 1) ** 2)
    zeta = beta
    for _ in range(50):  # fixed point of  -τβ(ζ+β) + log(ζ/β) = goal  (contracting for τβζ > 1)
        new = max((math.log(max(zeta, beta) / beta) if ratio else 0.0) - goal, 0.0) / (tau * beta) - beta
        if abs(new - zeta) < 1e-12 * max(1.0, zeta):
            break
        zeta = new
    return max(zeta, 0.0)


def _softmax(L: int, d: int, tau: float, target: float, a: float | None = None, phi: float = 0.0,
             delta: float = 0.02) -> ToyParams:
    v, u, _ = directions(d)
    n = slice_counts(L)
    a = smallest_a(L, target) if a is None else max(float(a), 1.0)
    D, b0p, _ = chebyshev_fit(mobius_shape(a, n), n)
    # z_b = β u. β is at least what the score gap needs (τ β² = log a) and at least what suppressing the
    # distractors with |z_l| = |z_b| needs (2 τ β² = log(L² / 4δ)); z_s then leans toward z_b by -α.
    beta = max(math.sqrt(math.log(a) / tau), math.sqrt(math.log(max(L, 1) ** 2 / (4 * delta)) / (2 * tau)))
    alpha = math.log(a) / (tau * beta) - beta  # s_b - s_s = τ β (β + α) = log a
    cp, sp = math.cos(phi), math.sin(phi)
    # |w| = R, z_s = -α u + R v: D = w·(z_s - z_b) = R² cos φ + R (α + β) sin φ
    ab = alpha + beta
    R = (-ab * sp + math.sqrt(ab * ab * sp * sp + 4 * cp * D)) / (2 * cp)
    b0 = b0p + R * beta * sp  # cancels q_b = w·z_b = -R β sin φ
    zeta = max(beta, _suppression(L, beta, tau, delta, ratio=False))
    return ToyParams(x_b=_t(beta * u), x_s=_t(R * v - alpha * u), x_l=_t(-zeta * u),
                     w=_t(R * (cp * v - sp * u)), b0=_t(b0))


def _softmax_preln_learned(L: int, d: int, tau: float, target: float, a: float | None = None,
                           theta: float | None = None, phi: float = 0.0, delta: float = 0.02) -> ToyParams:
    v, u, _ = directions(d)
    n = slice_counts(L)
    a = smallest_a(L, target) if a is None else max(float(a), 1.0)
    D, b0p, _ = chebyshev_fit(mobius_shape(a, n), n)
    cp, sp = math.cos(phi), math.sin(phi)
    if theta is None:
        # log c = -log a (1 + sin θ)/(1 - sin θ). Distractors shift the read-out by about (L²/4) c/a where
        # w ⟂ z_l, and by about 2 L c sin φ through q_l = w·z_l: keep both below δ.
        la = max(math.log(a), 1e-12)
        s1 = 1.0 - 2.0 * la / math.log(max(L, 1) ** 2 / (4.0 * delta))
        k2 = math.log(max(2.0 * max(L, 1) * sp / delta, 1.0))
        s2 = (k2 - la) / (k2 + la)
        theta = math.asin(min(max(s1, s2, 0.0), 0.95)) if a > 1 else 0.0
    ct, st = math.cos(theta), math.sin(theta)
    # |γ| = |w| = G; w = G (cos φ v - sin φ u) reads D = w·(z_s - z_b) = G² (cos θ cos φ + (1 - sin θ) sin φ)
    G = math.sqrt(D / (ct * cp + (1 - st) * sp))
    eps = math.log(a) / (tau * G * (1 - st))  # z_b = ε u after the LN bias shifts the sphere
    gamma = np.full(d, G / math.sqrt(d))
    beta_ln = -(G - eps) * u
    b0 = b0p + G * eps * sp  # cancels q_b = w·z_b = -G ε sin φ
    r = min(1.0, G)  # LN forgets the input scale
    return ToyParams(x_b=_t(r * u), x_s=_t(r * (ct * v + st * u)), x_l=_t(-r * u), w=_t(G * (cp * v - sp * u)),
                     b0=_t(b0), gamma=_t(gamma), beta=_t(beta_ln))


def _softmax_postln(L: int, d: int, tau: float, target: float, learned: bool, rho: float | None = None,
                    kappa: float = 0.0, delta: float = 0.02) -> ToyParams:
    v, u, _ = directions(d)
    n = slice_counts(L)
    rho = largest_rho(L, kappa, target) if rho is None else float(rho)
    K, b0, _ = chebyshev_fit(arc_shape(rho, kappa, n), n)
    beta = math.sqrt(math.log(1.0 / rho) / (tau * (1.0 - kappa)))  # a = e^{τβ²(1-κ)} = 1/ρ
    z_b, z_s = beta * u, beta * (kappa * u + v)
    if learned:
        W = math.sqrt(K / math.sqrt(d - 1))  # w ⊙ γ = W² e1 and LN(o)·e1 = sqrt(d-1) sin ψ
        e1 = np.zeros(d)
        e1[0] = 1.0
        extra = dict(w=_t(W * e1), gamma=_t(W * e1), beta=_t(np.zeros(d)))
    else:
        extra = dict(w=_t(K / math.sqrt(d) * v))
    # z_l = 0: a distractor only rescales the attention output, which post-LN (eps = 0) forgets entirely
    return ToyParams(x_b=_t(z_b), x_s=_t(z_s), x_l=_t(np.zeros(d)), b0=_t(b0), **extra)


def preln_bare_readout(cfg: ToyConfig, z: np.ndarray, L: int,
                       error_cap: float | None = None) -> tuple[np.ndarray, float, float]:
    """The full-domain Chebyshev read-out for fixed token vectors ``z`` (3, d) (no post-LN):
    ``min_{w, b0} max |λ(n, m)·(z w) + b0 - n|`` as a linear program. With ``error_cap``, instead the read-out
    of smallest ``max(|w_j|, |b0|)`` (coordinates in an orthonormal basis of span z) whose error is at most
    the cap. Returns ``w`` (d,), ``b0`` and the error (inf if infeasible)."""
    from scipy.optimize import linprog

    basis, _ = np.linalg.qr(z.T)  # (d, k): w only matters inside span(z)
    k = basis.shape[1]
    n_t, m_t = full_domain(L)
    lam = mixing_weights(cfg, torch.as_tensor(z, dtype=DTYPE), n_t, m_t).numpy()  # (P, 3)
    A = lam @ (z @ basis)  # (P, k)
    n = n_t.numpy()
    ones = np.ones((len(n), 1))
    if error_cap is None:
        # variables (c (k), b0, E): A c + b0 - n <= E and -(A c + b0 - n) <= E
        A_ub = np.vstack([np.hstack([A, ones, -ones]), np.hstack([-A, -ones, -ones])])
        b_ub = np.concatenate([n, -n])
    else:
        # variables (c (k), b0, T): |A c + b0 - n| <= cap, |c_j| <= T, |b0| <= T
        zeros = np.zeros((len(n), 1))
        eye = np.eye(k + 1)
        A_ub = np.vstack([np.hstack([A, ones, zeros]), np.hstack([-A, -ones, zeros]),
                          np.hstack([eye, -np.ones((k + 1, 1))]), np.hstack([-eye, -np.ones((k + 1, 1))])])
        b_ub = np.concatenate([n + error_cap, error_cap - n, np.zeros(2 * (k + 1))])
    cost = np.zeros(k + 2)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, bounds=[(None, None)] * (k + 1) + [(0, None)], method="highs")
    if res.status != 0:
        return np.zeros(z.shape[1]), 0.0, math.inf
    w, b0 = basis @ res.x[:k], float(res.x[k])
    err = float(np.abs(A @ res.x[:k] + b0 - n).max())
    return w, b0, err


def _softmax_preln_bare(L: int, d: int, tau: float, target: float, theta: float = 0.75 * math.pi,
                        chi: float = math.pi) -> ToyParams:
    v, u, t = directions(d)
    third = t if t is not None else -v
    sd = math.sqrt(d)
    z = np.stack([sd * u, sd * (math.cos(theta) * u + math.sin(theta) * v),
                  sd * (math.cos(chi) * u + math.sin(chi) * third)])  # LN'd tokens on the sphere
    cfg = ToyConfig("softmax-preln-bare", d, L, tau=tau)
    w, b0, err = preln_bare_readout(cfg, z, L)
    if err < 0.5:  # among the read-outs that count, the one of smallest norm (a little margin kept)
        w2, b2, err2 = preln_bare_readout(cfg, z, L, error_cap=max(err, 0.45) if err < 0.45 else (err + 0.5) / 2)
        if err2 < 0.5:
            w, b0 = w2, b2
    r = min(1.0, max(float(np.linalg.norm(w)), abs(b0)))  # LN forgets the input scale
    return ToyParams(x_b=_t(r * z[0] / sd), x_s=_t(r * z[1] / sd), x_l=_t(r * z[2] / sd), w=_t(w), b0=_t(b0))


_FAMILIES: dict[str, Callable[..., ToyParams]] = {
    "linear": _linear,
    "linear-preln-bare": _linear_preln_bare,
    "softmax": _softmax,
    "softmax-preln-learned": _softmax_preln_learned,
    "softmax-postln-bare": lambda *a, **k: _softmax_postln(*a, learned=False, **k),
    "softmax-postln-learned": lambda *a, **k: _softmax_postln(*a, learned=True, **k),
    "softmax-preln-bare": _softmax_preln_bare,
}


def construct(variant: str, L: int, d: int, tau: float | None = None, target: float = SLICE_TARGET,
              delta: float = 0.02, **free_scalars: float) -> ToyParams:
    """The construction of ``variant`` for maximum length ``L`` in dimension ``d``.

    free_scalars: the family's shape parameters (see :data:`FREE_SCALARS`); omitted ones take the value that
    meets ``target`` on the letter-free slice at the smallest scale (``a``, ``rho``) or a default (tilts).
    delta: the largest shift of the read-out the distractors may cause (sets the suppression score gap).
    The result is *not* checked here; :func:`best_construction` searches and checks.
    """
    validate(variant, L, d)
    unknown = set(free_scalars) - set(FREE_SCALARS[variant])
    if unknown:
        raise UsageError(f"{variant} has free scalars {', '.join(FREE_SCALARS[variant])}; got {', '.join(sorted(unknown))}")
    tau = 1.0 / math.sqrt(d) if tau is None else float(tau)
    if variant in ("softmax", "softmax-preln-learned", "softmax-postln-bare", "softmax-postln-learned"):
        free_scalars["delta"] = delta
    return _FAMILIES[variant](int(L), int(d), tau, target, **free_scalars)


# ---- search over the free scalars ------------------------------------------------------------------------


@dataclass
class Construction:
    """A checked construction: its config, parameters, free scalars and full-domain check."""

    cfg: ToyConfig
    params: ToyParams
    free: dict[str, float]
    check: CheckResult
    target: float = SLICE_TARGET
    notes: list[str] = field(default_factory=list)

    @property
    def max_norm(self) -> float:
        return self.check.max_norm

    def to_dict(self) -> dict:
        out = self.params.to_dict(self.cfg)
        out["L"] = self.cfg.L
        out["free_scalars"] = self.free
        out["check"] = {k: v for k, v in self.check.to_dict().items()
                        if k in ("passed", "worst_error", "worst_pair", "max_norm", "norms", "L", "pairs")}
        return out


_TILT = {"softmax": ("phi", 0.0, 1.4), "softmax-preln-learned": ("phi", 0.0, 1.2),
         "softmax-postln-bare": ("kappa", -3.0, 0.6), "softmax-postln-learned": ("kappa", -3.0, 0.6)}


def tuned_free_scalars(variant: str, L: int, d: int, tau: float, target: float,
                       delta: float = 0.02) -> dict[str, float]:
    """The free scalars minimising the largest norm, judged on the letter-free slice at ``target``
    (a bounded 1-D search over the family's tilt; the scale scalar follows from the target)."""
    if variant not in _TILT:
        return {}
    from scipy.optimize import minimize_scalar

    name, lo, hi = _TILT[variant]

    def cost(x: float) -> float:
        try:
            p = _FAMILIES[variant](L, d, tau, target, delta=delta, **{name: x})
        except (ValueError, ZeroDivisionError, OverflowError):
            return math.inf
        norm = p.max_norm()
        return norm if math.isfinite(norm) else math.inf

    grid = np.linspace(lo, hi, 11)
    costs = [cost(x) for x in grid]
    i = int(np.argmin(costs))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    best = minimize_scalar(cost, bounds=(a, b), method="bounded", options={"xatol": 1e-3})
    x = float(best.x) if best.fun <= costs[i] else float(grid[i])
    return {name: x}


def _preln_bare_search(L: int, d: int, tau: float, tune: bool = True) -> tuple[dict[str, float], float]:
    """Angles of ``z_s`` and ``z_l`` (from ``z_b``): first those minimising the full-domain LP error at ``L``;
    where that error leaves room (< 0.45), then those minimising the norm of the smallest read-out."""
    from scipy.optimize import minimize

    v, u, t = directions(d)
    cfg = ToyConfig("softmax-preln-bare", d, L, tau=tau)
    third = t if t is not None else -v
    sd = math.sqrt(d)

    def tokens(x: np.ndarray) -> np.ndarray:
        th, ch = x
        return np.stack([sd * u, sd * (math.cos(th) * u + math.sin(th) * v),
                         sd * (math.cos(ch) * u + math.sin(ch) * third)])

    def err(x: np.ndarray) -> float:
        return preln_bare_readout(cfg, tokens(x), L)[2]

    def norm(x: np.ndarray) -> float:
        w, b0, e = preln_bare_readout(cfg, tokens(x), L, error_cap=0.45)
        return max(float(np.linalg.norm(w)), abs(b0)) if e < 0.5 else 1e12 + err(x)

    starts = [(th, ch) for th in np.linspace(0.55, 0.95, 5) * math.pi for ch in (0.8 * math.pi, math.pi)]
    scores = [err(np.array(s)) for s in starts]
    x, e = np.array(starts[int(np.argmin(scores))]), min(scores)
    if e >= 0.45:  # near L_cap: first find angles that count at all
        res = minimize(err, x, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-7, "maxfev": 80})
        if res.fun < e:
            x, e = res.x, float(res.fun)
    if e < 0.45 and tune:
        res = minimize(norm, x, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-3, "maxfev": 30})
        if res.fun < 1e12:
            x, e = res.x, err(res.x)
    return {"theta": float(x[0]), "chi": float(x[1])}, e


def best_construction(variant: str, L: int, d: int, tau: float | None = None, tune: bool = True,
                      chunk: int | None = None) -> Construction:
    """The construction with the smallest largest-norm found by search, verified by the full-domain check.

    The slice target starts at 0.49 and is lowered by the distractors' excess each time the full check fails
    (at most 12 times); raises ``ValueError`` if nothing passes (``softmax-preln-bare`` beyond its L_cap).
    """
    validate(variant, L, d)
    tau = 1.0 / math.sqrt(d) if tau is None else float(tau)
    cfg = ToyConfig(variant, int(d), int(L), tau=tau)
    kw = {} if chunk is None else {"chunk": chunk}
    if variant == "softmax-preln-bare":
        free, _ = _preln_bare_search(int(L), int(d), tau, tune)
        params = construct(variant, L, d, tau=tau, **free)
        res = full_domain_check(cfg, params, **kw)
        if not res.passed:
            raise ValueError(f"no softmax-preln-bare construction found at L={L}, d={d} "
                             f"(worst error {res.worst_error:.3f}); see `countlens toy lcap`")
        return Construction(cfg, params, free, res, target=math.nan)
    target, delta = SLICE_TARGET, 0.02
    last = None
    for _ in range(12):
        free = tuned_free_scalars(variant, int(L), int(d), tau, target, delta) if tune else {}
        params = construct(variant, L, d, tau=tau, target=target, delta=delta, **free)
        res = full_domain_check(cfg, params, **kw)
        if res.passed:
            return Construction(cfg, params, free, res, target=target)
        last = res
        target -= (res.worst_error - 0.5) + 0.01 if math.isfinite(res.worst_error) else target / 2
        target = max(target, 0.05)
        delta /= 4
    raise ValueError(f"no {variant} construction passed at L={L}, d={d} (last worst error "
                     f"{last.worst_error:.3g} at {last.worst_pair})")


__all__ = [
    "FREE_SCALARS", "Construction", "construct", "best_construction", "chebyshev_fit", "directions",
    "mobius_shape", "arc_shape", "smallest_a", "largest_rho", "tuned_free_scalars", "preln_bare_readout",
    "validate", "min_dimension",
]
