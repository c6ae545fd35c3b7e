"""Norm budgets: ``b_min(L)``, its inverse ``l_max(B)``, rate fits, ``L_cap(d)`` and Table 3's "constr." column.

``b_min(variant, L, d)`` is the largest per-vector norm of the best construction found at ``L`` (a search over
the family's free scalars, then the full-domain check): an upper bound on the true ``B_min``. ``l_max`` inverts
it by bisection on the letter-free-slice estimate and verifies the answer on the full domain.

``L_cap(d)`` of ``softmax-preln-bare`` is bracketed from both sides: ``l_cap`` is the longest length at which a
construction passes the full check, and ``l_infeasible`` the shortest length at which *no* parameters of any
norm can count, by this argument. Bare pre-LN puts every ``z_t`` on the sphere ``|z| = sqrt(d)``, so
``s_b - s_s = τ z_b·(z_b - z_s) <= 2τd`` and ``a = e^{s_b - s_s} <= A = e^{2τd}``. On the letter-free slice
``ŷ(n) = b0' + D n / (a + n)``. If the errors ``e(n) = ŷ(n) - n`` at ``n = 0, k, L`` are all below 1/2, then
``(L-k) e(0) - L e(k) + k e(L) = D kL(L-k) / ((a+k)(a+L))`` is below ``L`` and ``e(L) - e(0) > -1`` gives
``D > (L-1)(a+L)/L``; together ``a > k((L-1)(L-k)/L - 1)``. Once that exceeds ``A`` for some ``k``, length
``L`` (and every longer one, whose domain contains it) is infeasible.

That bound is loose by one or two lengths; :func:`preln_bare_lp` closes the gap exactly. Write
``β_t = b0 + w·z_t``, ``α = e^{s_s - s_b}`` and ``γ = e^{s_l - s_b}``; on the sphere both lie in
``[e^{-2τd}, 1]``, and ``ŷ(n, m) = (β_b + n α β_s + m γ β_l) / (1 + n α + m γ)``. With ``π = α β_s`` and
``ξ = γ β_l`` every constraint ``|ŷ(n, m) - n| < 1/2`` of the whole domain is *linear* in
``(β_b, π, ξ, α, γ)`` — any ``w`` and any angles of the token vectors included — so one LP decides whether
any parameters count to ``L``. When it has no strictly feasible point, its dual gives a handful of
constraints whose nonnegative combination reads ``0 < (negative number)``; the multipliers are recomputed
in exact rational arithmetic, so the proof does not rest on the solver's rounding.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from countlens.core.errors import ConfigError
from countlens.toy.constructions import (
    Construction,
    best_construction,
    construct,
    tuned_free_scalars,
    validate,
)
from countlens.toy.model import VARIANTS

CLAIMED = {  # Table 1's claimed rate of B_min(L) at fixed d >= 3: (as printed, exponent of L)
    "linear": ("0", 0.0),
    "linear-preln-bare": ("0", 0.0),
    "softmax": ("1", 1.0),
    "softmax-preln-learned": ("1", 1.0),
    "softmax-postln-bare": ("3/2", 1.5),
    "softmax-postln-learned": ("3/4", 0.75),
    "softmax-preln-bare": ("inf beyond L_cap(d)", None),
}
TABLE3_VARIANTS = ("softmax", "softmax-postln-bare", "softmax-postln-learned")
TABLE3_B = (10, 30, 100, 300, 1000)  # Table 3's caps B
TABLE3_PAPER = {  # the paper's "constr." column at d = 16, one value per cap of TABLE3_B
    "softmax": (15, 50, 169, 510, 1705),
    "softmax-postln-bare": (11, 24, 54, 112, 251),
    "softmax-postln-learned": (43, 186, 928, 4016, 20000),
}
CONSTANT_VARIANTS = ("linear", "linear-preln-bare")


def _tau(d: int, tau: float | None) -> float:
    return 1.0 / math.sqrt(d) if tau is None else float(tau)


def b_min_construction(variant: str, L: int, d: int, tau: float | None = None) -> Construction | None:
    """The checked construction behind :func:`b_min`; ``None`` where none exists (bare pre-LN past L_cap)."""
    validate(variant, L, d)
    if variant == "softmax-preln-bare" and L >= _proven_bound(d, _tau(d, tau)):
        return None
    try:
        return best_construction(variant, L, d, tau=tau)
    except ValueError:
        if variant == "softmax-preln-bare":
            return None
        raise


@functools.lru_cache(maxsize=64)
def _proven_bound(d: int, tau: float) -> int:
    bound = l_infeasible(d, tau)[0]
    return preln_bare_bound(d, tau)[0] if bound - 1 <= LCAP_SEARCH_LIMIT else bound


def b_min(variant: str, L: int, d: int, tau: float | None = None) -> float:
    """Smallest per-vector cap at which the construction family counts on the full domain of ``L``
    (verified by the full check); ``inf`` where no construction exists."""
    c = b_min_construction(variant, L, d, tau)
    return math.inf if c is None else c.max_norm


def fit_slope(L: list[int] | np.ndarray, values: list[float | None] | np.ndarray) -> float | None:
    """The log-log rate: least-squares slope of ``log values`` against ``log L`` over the entries whose value
    is finite and positive (``None``, ``inf``, ``nan`` and ``<= 0`` are left out); ``None`` where fewer than
    two entries, or entries at only one ``L``, are left. The one log-log slope of the project: the toy's rate
    fits (Table 1) and the organisms' (:mod:`countlens.llm.organisms.scaling`) both call it."""
    L = np.asarray(L, dtype=np.float64)
    values = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    keep = np.isfinite(values) & (values > 0)
    if keep.sum() < 2 or len(np.unique(L[keep])) < 2:
        return None
    return float(np.polyfit(np.log(L[keep]), np.log(values[keep]), 1)[0])


@dataclass
class RateFit:
    """``b_min`` over a grid of ``L`` for one variant, its log-log slope and the claimed exponent."""

    variant: str
    L: list[int]
    b_min: list[float]
    slope: float | None
    claimed: str
    claimed_exponent: float | None = None  # None: no finite rate (bare pre-LN)
    worst_error: list[float] = field(default_factory=list)
    free_scalars: list[dict] = field(default_factory=list)
    slope_L_ge_100: float | None = None  # the rates are asymptotic: the fit over the grid's L >= 100 only


@dataclass
class RateFits:
    """Table 1, measured: one :class:`RateFit` per variant at dimension ``d`` (the experiment's result is
    :class:`countlens.toy.experiments.RatesResult`)."""

    d: int
    tau: float
    variants: dict[str, RateFit]


def fit_rates(d: int, Ls: list[int], variants: tuple[str, ...] = VARIANTS, tau: float | None = None,
              progress=None) -> RateFits:
    """Measure ``b_min`` on the grid ``Ls`` for each variant and fit the log-log slope.

    progress: optional callable ``progress(variant, L)`` called before each construction (the CLI passes a
    tqdm update). ``softmax-preln-bare`` gets ``inf`` past its L_cap and no slope.
    """
    tau = _tau(d, tau)
    fits = {}
    for v in variants:
        bs, errs, frees = [], [], []
        for L in Ls:
            if progress is not None:
                progress(v, L)
            c = b_min_construction(v, int(L), d, tau)
            bs.append(math.inf if c is None else c.max_norm)
            errs.append(math.nan if c is None else c.check.worst_error)
            frees.append({} if c is None else c.free)
        claimed, expo = CLAIMED[v]
        slope = tail = None
        if v != "softmax-preln-bare":
            slope = fit_slope(Ls, bs)
            big = [i for i, L in enumerate(Ls) if L >= 100]
            tail = fit_slope([Ls[i] for i in big], [bs[i] for i in big]) if len(big) >= 2 else None
        fits[v] = RateFit(v, [int(x) for x in Ls], bs, slope, claimed, expo, errs, frees, tail)
    return RateFits(d=int(d), tau=tau, variants=fits)


# ---- L_cap of bare pre-LN --------------------------------------------------------------------------------


def preln_bare_needed_a(L: int) -> float:
    """``max_k k((L-1)(L-k)/L - 1)``: the attention ratio ``a`` that counting to ``L`` on the letter-free
    slice provably needs (see module docstring)."""
    if L < 2:
        return 0.0
    k = np.arange(1, L, dtype=np.float64)
    return float(np.max(k * ((L - 1) * (L - k) / L - 1.0)))


def l_infeasible(d: int, tau: float | None = None) -> tuple[int, str]:
    """Shortest ``L`` at which bare pre-LN provably cannot count (any norm), and the reason in words."""
    tau = _tau(d, tau)
    log_A = 2.0 * tau * d
    lo, hi = 1, 2
    while math.log(max(preln_bare_needed_a(hi), 1e-300)) < log_A:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if math.log(max(preln_bare_needed_a(mid), 1e-300)) >= log_A:
            hi = mid
        else:
            lo = mid
    k = np.arange(1, hi, dtype=np.float64)
    kstar = int(k[np.argmax(k * ((hi - 1) * (hi - k) / hi - 1.0))])
    reason = (f"bare pre-LN puts every z_t on the sphere |z| = sqrt(d), so s_b - s_s <= 2*tau*d = {log_A:.4g} and "
              f"a = exp(s_b - s_s) <= {math.exp(log_A):.6g}; rounding-exact counting at n = 0, {kstar}, {hi} "
              f"(m = 0) needs a > {preln_bare_needed_a(hi):.6g}, so L >= {hi} is infeasible at any norm")
    return hi, reason


def _preln_bare_rows(L: int, lo: float) -> tuple[np.ndarray, np.ndarray, list]:
    """The LP of the module docstring: rows ``A x <= b`` in ``x = (β_b, π, ξ, α, γ)``, each pair's two sides
    with the margin ``δ`` subtracted (column 5: 1 for a pair row), then the box ``lo <= α, γ <= 1``.
    Entries are integers or halves (exact in float64). Returns ``A`` (R, 6), ``b`` (R,) and row labels."""
    n, j = np.triu_indices(L + 1)
    n, m = n.astype(np.float64), (j - n).astype(np.float64)
    one = np.ones_like(n)
    above = np.stack([one, n, m, -(n * n + n / 2), -(n * m + m / 2), one], 1)  # ŷ - n <= 1/2 - δ
    below = np.stack([-one, -n, -m, n * n - n / 2, n * m - m / 2, one], 1)  # n - ŷ <= 1/2 - δ
    box = np.array([[0, 0, 0, -1, 0, 0], [0, 0, 0, 1, 0, 0], [0, 0, 0, 0, -1, 0], [0, 0, 0, 0, 1, 0]], float)
    A = np.vstack([above, below, box])
    b = np.concatenate([n + 0.5, 0.5 - n, [-lo, 1.0, -lo, 1.0]])
    pairs = [(int(a), int(c)) for a, c in zip(n, m, strict=True)]
    labels = ([("above", p) for p in pairs] + [("below", p) for p in pairs]
              + [("alpha >=", None), ("alpha <=", None), ("gamma >=", None), ("gamma <=", None)])
    return A, b, labels


def _exact_solve(rows: list[list[Fraction]], k: int) -> list[Fraction] | None:
    """The unique solution of an (over-determined, consistent) rational system ``[M | r]``, else ``None``."""
    M = [r[:] for r in rows]
    pivots, r = [], 0
    for c in range(k):
        p = next((i for i in range(r, len(M)) if M[i][c] != 0), None)
        if p is None:
            continue
        M[r], M[p] = M[p], M[r]
        M[r] = [v / M[r][c] for v in M[r]]
        for i in range(len(M)):
            if i != r and M[i][c] != 0:
                f = M[i][c]
                M[i] = [a - f * b for a, b in zip(M[i], M[r], strict=True)]
        pivots.append(c)
        r += 1
    if len(pivots) < k or any(all(v == 0 for v in row[:k]) and row[k] != 0 for row in M):
        return None
    return [M[i][k] for i in range(k)]


@dataclass
class LpProof:
    """Outcome of :func:`preln_bare_lp` at one ``L``: the LP's largest margin ``margin`` (> 0: the relaxed
    problem counts with room to spare) and, when it is not positive, the exact certificate: ``terms``
    (label, pair or None, multiplier) and ``total``, the combination's right-hand side (< 0: infeasible)."""

    L: int
    margin: float
    terms: list[tuple[str, tuple[int, int] | None, Fraction]] = field(default_factory=list)
    total: Fraction | None = None

    @property
    def infeasible(self) -> bool:
        return self.total is not None and self.total < 0

    def text(self, d: int, tau: float) -> str:
        """The proof in words (only when :attr:`infeasible`)."""
        side = {"above": "ŷ({n},{m}) - {n} < 1/2", "below": "{n} - ŷ({n},{m}) < 1/2"}
        parts = []
        for label, pair, y in self.terms:
            what = side[label].format(n=pair[0], m=pair[1]) if pair else f"{label} e^(-2τd)"
            parts.append(f"{y} × [{what}]")
        return (f"an LP over the mixing weights on the whole domain (module docstring of countlens.toy.budget): "
                f"with β_t = b0 + w·z_t, α = e^(s_s - s_b), γ = e^(s_l - s_b) in [e^(-2τd), 1] = "
                f"[{math.exp(-2 * tau * d):.6g}, 1], every |ŷ(n, m) - n| < 1/2 is linear in (β_b, αβ_s, γβ_l, α, γ); "
                f"adding {' + '.join(parts)} (exact rationals) leaves 0 < {float(self.total):.6g}, so no "
                f"parameters of any norm count to L = {self.L}")


def preln_bare_lp(L: int, d: int, tau: float | None = None) -> LpProof:
    """Decide the bare pre-LN relaxation at ``L`` (see the module docstring) by one LP over the whole domain."""
    from scipy.optimize import linprog

    tau = _tau(d, tau)
    lo = math.exp(-2.0 * tau * d) * (1.0 - 1e-9)  # strictly below e^{-2τd}: the box only widens
    A, b, labels = _preln_bare_rows(int(L), lo)
    cost = np.zeros(6)
    cost[5] = -1.0  # maximise the margin δ
    res = linprog(cost, A_ub=A, b_ub=b, bounds=[(None, None)] * 5 + [(None, 1.0)], method="highs")
    if res.status != 0:
        raise RuntimeError(f"the L_cap LP at L={L} did not solve: {res.message}")
    out = LpProof(int(L), float(-res.fun))
    if out.margin > 0:
        return out
    y = -res.ineqlin.marginals  # dual multipliers, >= 0
    support = [int(i) for i in np.argsort(-y) if y[i] > 1e-12]
    exact_b = [Fraction(float(v)) for v in b]
    exact_b[-4], exact_b[-2] = -Fraction(lo), -Fraction(lo)
    # y^T A = 0 on the five variables and y^T (δ column) = 1; then δ* <= y^T b
    system = [[Fraction(float(A[i, c])) for i in support] + [Fraction(int(c == 5))] for c in range(6)]
    sol = _exact_solve(system, len(support))
    if sol is None or any(v < 0 for v in sol):
        return out
    out.terms = [(labels[i][0], labels[i][1], v) for i, v in zip(support, sol, strict=True) if v != 0]
    out.total = sum((v * exact_b[i] for i, v in zip(support, sol, strict=True)), Fraction(0))
    return out


def preln_bare_bound(d: int, tau: float | None = None) -> tuple[int, str]:
    """Shortest ``L`` at which bare pre-LN provably cannot count: the LP's, searched down from the
    letter-free bound of :func:`l_infeasible` (which it never exceeds). Returns ``(L, proof in words)``."""
    tau = _tau(d, tau)
    bound, reason = l_infeasible(d, tau)
    best: LpProof | None = None
    L = bound
    while L > 1:
        proof = preln_bare_lp(L, d, tau)
        if not proof.infeasible:
            break
        best, L = proof, L - 1
    if best is None:
        return bound, reason
    return best.L, best.text(d, tau) + f" (the letter-free argument alone: L >= {bound}; {reason})"


@dataclass
class LCap:
    """L_cap(d) of ``softmax-preln-bare``: constructed (``l_cap``, verified) and proven bound."""

    d: int
    tau: float
    l_cap: int | None
    l_infeasible: int
    reason: str
    b_min_at_cap: float | None
    worst_error_at_cap: float | None


LCAP_SEARCH_LIMIT = 400  # the constructive search solves an LP over the whole domain; beyond this, report the bound


def l_cap(d: int, tau: float | None = None) -> LCap:
    """Bracket L_cap(d) for ``softmax-preln-bare``: the longest constructed length and the proven bound."""
    validate("softmax-preln-bare", 1, d)
    tau = _tau(d, tau)
    bound, reason = l_infeasible(d, tau)
    if bound - 1 <= LCAP_SEARCH_LIMIT:
        bound, reason = preln_bare_bound(d, tau)
    if bound - 1 > LCAP_SEARCH_LIMIT:
        return LCap(d, tau, None, bound, reason + f" (constructive search skipped: bound > {LCAP_SEARCH_LIMIT})",
                    None, None)

    def attempt(L: int, tune: bool = False) -> Construction | None:  # feasibility first, norm at the end
        try:
            return best_construction("softmax-preln-bare", L, d, tau=tau, tune=tune)
        except ValueError:
            return None

    # gallop down from the bound, then bisect between the last failure and the first success
    fail, step, good, L = bound, 1, None, bound - 1
    while L >= 1:
        good = attempt(L)
        if good is not None:
            break
        fail, L, step = L, L - step, step * 2
    if good is None:
        return LCap(d, tau, 0, bound, reason, None, None)
    lo = L
    while fail - lo > 1:
        mid = (lo + fail) // 2
        c = attempt(mid)
        if c is None:
            fail = mid
        else:
            lo, good = mid, c
    if good.check.worst_error < 0.45:  # room left for the norm-minimising stage of the search
        good = attempt(lo, tune=True) or good
    return LCap(d, tau, lo, bound, reason, good.max_norm, good.check.worst_error)


# ---- l_max and Table 3 -----------------------------------------------------------------------------------


def _estimate(variant: str, L: int, d: int, tau: float, free: dict) -> float:
    """Largest norm of the construction judged on the letter-free slice only (cheap, unverified)."""
    try:
        return construct(variant, L, d, tau=tau, **free).max_norm()
    except (ValueError, ZeroDivisionError, OverflowError):
        return math.inf


def _bisect_length(ok, lo: int, hi: int) -> int:
    """Largest integer in [lo, hi) with ``ok`` true, given ``ok(lo)`` and not ``ok(hi)``."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


@dataclass
class LMax:
    """``l_max(variant, B, d)``: the longest verified length and the construction that achieves it."""

    variant: str
    B: float
    d: int
    L: float  # inf for the linear variants once B suffices
    max_norm: float | None
    worst_error: float | None


def l_max(variant: str, B: float, d: int, tau: float | None = None, max_L: int = 10**6) -> LMax:
    """Longest ``L`` at which the construction family counts under the per-vector cap ``B`` (verified)."""
    validate(variant, 1, d)
    tau = _tau(d, tau)
    if B <= 0:
        raise ConfigError("B", f"{{B}} must be positive, got {B}")
    if variant in CONSTANT_VARIANTS:
        c = best_construction(variant, 1, d, tau=tau)
        ok = c.max_norm <= B
        return LMax(variant, B, d, math.inf if ok else 0, c.max_norm, c.check.worst_error)
    if variant == "softmax-preln-bare":  # b_min grows with L up to L_cap, then is infinite
        found: dict[int, Construction] = {}

        def fits_bare(L: int) -> bool:
            c = b_min_construction(variant, L, d, tau)
            if c is not None and c.max_norm <= B:
                found[L] = c
                return True
            return False

        top = (l_cap(d, tau).l_cap or 0) + 1
        if top <= 1 or not fits_bare(1):
            return LMax(variant, B, d, 0, None, None)
        L = top - 1 if fits_bare(top - 1) else _bisect_length(fits_bare, 1, top - 1)
        best = found[L]
        return LMax(variant, B, d, L, best.max_norm, best.check.worst_error)
    def fits(L: int) -> bool:  # the tilt's best value moves with L (sharply for post-LN): re-tune each time
        return _estimate(variant, L, d, tau, tuned_free_scalars(variant, L, d, tau, 0.49)) <= B

    if not fits(1):
        return LMax(variant, B, d, 0, None, None)
    lo, hi = 1, 2
    while hi <= max_L and fits(hi):
        lo, hi = hi, hi * 2
    lo = _bisect_length(fits, lo, hi)
    L = lo
    while L >= 1:  # the full check has the last word
        c = best_construction(variant, L, d, tau=tau)
        if c.max_norm <= B:
            return LMax(variant, B, d, L, c.max_norm, c.check.worst_error)
        L = int(L * 0.995) if L > 200 else L - 1
    return LMax(variant, B, d, 0, None, None)


__all__ = [
    "CLAIMED", "TABLE3_VARIANTS", "TABLE3_PAPER", "TABLE3_B", "b_min", "b_min_construction", "fit_slope",
    "fit_rates", "RateFit", "RateFits", "l_infeasible", "l_cap", "LCap", "l_max", "LMax",
    "preln_bare_needed_a", "preln_bare_lp", "preln_bare_bound", "LpProof",
]
