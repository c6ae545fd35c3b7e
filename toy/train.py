"""Training the toy model from random initialisation (docs/definitions.md §1, "Training").

Three optimisers, all float64 and deterministic for a given seed:

- ``lbfgs``: full-batch L-BFGS with strong-Wolfe line search (the paper's main optimiser). One *step* is one
  L-BFGS iteration (``max_iter=1``, with up to 25 function evaluations for its line search), so the cap is
  enforced after every iteration and the curvature history carries over between steps.
- ``adam``: full-batch Adam. ``adam-minibatch``: Adam on batches of ``batch_size`` (1,024) training pairs,
  drawn without replacement within a batch.

The loss is MSE against the count for the regression read-out (or, with ``loss="max"``, a smooth maximum of
the squared error) and cross-entropy over the ``L + 1`` classes for classification, evaluated with its
gradient in reduced form by :mod:`countlens.toy.domain_loss` (a few multiply-adds per pair, independent of
``d``). An optional per-vector cap ``B`` is enforced by projection after every step: each of
``x_b, x_s, x_l, w, γ, β`` and each row of ``U`` is scaled back to ℓ2 norm ``<= B``, and ``b0`` and each class
bias ``c_k`` (1-vectors) are clipped to ``[-B, B]``.

The domain's pairs are split IID into train and held-out test pairs (``test_fraction``, seeded). Every
``log_every`` steps the trainer logs the training loss, held-out exact accuracy, the full-domain worst
error (:func:`countlens.toy.check.full_domain_check`), the largest per-vector norm, the score scale
``a = exp(s_b − s_s)`` and the adjacent-spacing ratio of ``h(n, 0)`` (high over low counts). A NaN or inf
loss or parameter raises :class:`TrainingDiverged` naming the step; nothing is returned as a result then.

**Working-set training** (``working_set > 0``, regression). The full-domain worst error is decided by few
pairs (the domain's edges ``n = L``, ``m = 0``, ``n + m = L``), so instead of every pair each step, the
optimiser sees a working set: the edges plus ``working_set`` random pairs. Every ``log_every`` steps the full
check runs; if it fails, the ``grow`` worst pairs of the domain and ``grow`` fresh random ones join the set,
and training goes on (L-BFGS keeps its curvature history) until the check passes or ``steps`` run out. The
full-domain check is the only certificate: "passed" always means every ``(n, m)`` with ``n + m <= L``.
There is no held-out split then (at L = 10,000 it would hold 10^7 pairs): ``test_exact_accuracy`` is the
exact accuracy over the whole domain.

**Which loss.** The rounding criterion is a maximum over pairs; MSE spreads the error budget over all of
them (the mean rewards the bulk, and under a cap the edge then fails), the smooth maximum
``(1/β) log mean exp(β r²)`` (``loss="max"``) aims at the worst pair. Neither passes everywhere, so Table 3's
working-set runs try the smooth max first, then MSE; full-batch runs (Table 2, whose held-out accuracy the
paper reports for MSE training) keep MSE. Measured: BENCHMARKS.md, "Toy training: which loss, which
coordinates".

**Polar coordinates** (``parametrization="polar"``, :class:`PolarCoordinates`): the optimiser moves each
vector's log norm and direction instead of its entries; the cap becomes a bound on the log norm, the same
projection. Counting further needs a larger score scale and a read-out that grows with it, a valley that
bends exponentially in the vectors' entries and gently in their log norms; some runs stall in Cartesian
coordinates and pass in polar ones, others the other way round, so Table 3 tries polar first, then
Cartesian (measured: the same BENCHMARKS.md section). Everything else (Table 2, the figures) trains in
Cartesian coordinates, as the paper did.
"""

from __future__ import annotations

import copy
import hashlib
import io
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from countlens.core.cache import refuse_other_settings
from countlens.core.errors import ConfigError, UsageError
from countlens.core.fields import AtLeast, OneOf, Positive, check_fields
from countlens.core.io import write_bytes_atomic
from countlens.core.pool import progress_bar
from countlens.core.results import Result, result_provenance
from countlens.toy import model
from countlens.toy.cap import PolarCoordinates, project_to_cap
from countlens.toy.check import full_domain_check, n_pairs
from countlens.toy.domain_loss import LOSSES, PairSet, loss_and_grad, residuals, worst_pairs
from countlens.toy.model import DTYPE, ToyConfig, ToyParams

OPTIMIZERS = ("lbfgs", "adam", "adam-minibatch")
PARAMETRIZATIONS = ("cartesian", "polar")
_DEFAULT_LR = {"lbfgs": 1.0, "adam": 1e-2, "adam-minibatch": 1e-2}
_CHECKPOINT_FORMAT = 1


class TrainingDiverged(Exception):
    """The loss or a parameter became NaN or inf at ``step``; the run has no result."""

    def __init__(self, step: int, what: str):
        super().__init__(f"training diverged at step {step}: {what}")
        self.step = step
        self.what = what


@dataclass(frozen=True)
class TrainConfig:
    """How to train: optimiser, steps, seed and cap.

    lr: learning rate (L-BFGS: initial step length, default 1; Adam: default 1e-2). cap: per-vector norm
    bound ``B`` (``None``: uncapped). init_scale: every initial vector has norm ≈ this. log_every: steps
    between log entries (and early-stop checks). stop_when_passed: stop at the first log step at which the
    full-domain check passes. ce_scale: classification's cross-entropy is taken on ``ce_scale ×`` the class
    scores — a fixed inverse temperature of the loss only; predictions, norms and the check are unchanged.
    loss: regression's ``"mse"`` or ``"max"`` (smooth maximum of the squared error, sharpness ``beta``).
    working_set: 0 trains on the IID train split; ``k > 0`` trains on the domain's edges plus ``k`` random
    pairs, growing by the ``grow`` worst and ``grow`` random pairs after every failed check (every
    ``log_every`` steps; see the module docstring). parametrization: what the optimiser moves,
    ``"cartesian"`` (the vectors' entries) or ``"polar"`` (each vector's log norm and direction; see
    :class:`PolarCoordinates`). patience: ``k > 0`` stops a run once ``k`` log steps in a row have not
    lowered the best full-domain worst error so far by 1 % (a run stuck in a basin); 0: never.
    """

    optimizer: str = "lbfgs"
    """one of lbfgs, adam, adam-minibatch"""
    steps: int = 300
    """optimiser steps (L-BFGS iterations)"""
    seed: int = 0
    """initialisation and train/test split seed"""
    cap: float | None = None
    """per-vector norm bound B, enforced by projection (default: uncapped)"""
    lr: float | None = None
    """learning rate (default: 1 for L-BFGS, 1e-2 for Adam)"""
    batch_size: int = 1024
    """adam-minibatch: pairs per batch"""
    test_fraction: float = 0.2
    """share of the domain's pairs held out (IID) for test exact accuracy"""
    log_every: int = 10
    """steps between log entries"""
    stop_when_passed: bool = False
    """stop once the full-domain check passes"""
    init_scale: float = 1.0
    """norm of every initial vector (approximately)"""
    history_size: int = 50
    """L-BFGS history size"""
    ce_scale: float = 1.0
    """classification: cross-entropy on this multiple of the scores (loss temperature only)"""
    loss: str = "mse"
    """regression loss: mse, or max (smooth maximum of the squared error)"""
    beta: float = 10.0
    """sharpness of {loss} max"""
    working_set: int = 0
    """0: train on the IID train split; k > 0: working-set training from the domain's edges plus k random
    pairs, grown by the worst pairs after every failed check, every {log_every} steps"""
    grow: int = 256
    """working set: worst pairs (and as many random ones) added after each failed check"""
    parametrization: str = "cartesian"
    """what the optimiser moves: the vectors' entries (cartesian) or each vector's log norm and direction
    (polar)"""
    patience: int = 0
    """stop after this many log steps in a row without lowering the best worst error by 1 % (0: never)"""

    FIELDS: ClassVar[dict] = {
        "optimizer": OneOf(OPTIMIZERS), "steps": AtLeast(1), "batch_size": AtLeast(1), "log_every": AtLeast(1),
        "ce_scale": Positive(), "init_scale": Positive(), "loss": OneOf(LOSSES), "beta": Positive(),
        "working_set": AtLeast(0, " pairs (0: the IID train split)"), "grow": AtLeast(1, " pairs"),
        "parametrization": OneOf(PARAMETRIZATIONS), "patience": AtLeast(0, " (0: never stop for it)")}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS)
        if self.cap is not None and not (math.isfinite(self.cap) and self.cap > 0):
            raise ConfigError("cap", f"{{cap}} must be a positive finite norm bound (no vector fits under {self.cap})")
        if self.lr is None:
            object.__setattr__(self, "lr", _DEFAULT_LR[self.optimizer])
        Positive()(self.lr, "lr")
        if not 0 < self.test_fraction < 1:
            raise ConfigError("test_fraction", f"{{test_fraction}} must lie strictly between 0 and 1, got {self.test_fraction}")
        if self.working_set and self.optimizer == "adam-minibatch":
            raise ConfigError("working_set", "working-set training ({working_set}) takes a full-batch {optimizer} "
                                             "(lbfgs or adam)", also=("optimizer",))

    def trajectory_key(self) -> dict[str, Any]:
        """The fields that determine the optimisation trajectory (not how long or how often it logs; with a
        working set, how often it checks does shape the trajectory)."""
        skip = {"steps", "stop_when_passed", "patience"} | (set() if self.working_set else {"log_every"})
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


@dataclass
class TrainResult(Result):
    """One training run: final metrics, the log, and the trained parameters.

    Its JSON is a toy parameter file (:func:`~countlens.toy.model.read_params`): the fields, the vectors of
    ``params`` at the top level and a ``check`` block (the full-domain check of the final parameters), so
    ``countlens toy check --params`` and ``probe toy-acts`` read it as they read a construction."""

    FILE: ClassVar[str] = "train.json"
    COMMAND: ClassVar[str] = "countlens toy train"

    variant: str
    d: int
    L: int
    readout: str
    tau: float
    train: dict[str, Any]
    steps_run: int
    stopped_early: bool
    test_exact_accuracy: float
    full_domain_worst_error: float
    worst_pair: list[int]
    passed: bool
    max_norm: float
    norms: dict[str, float]
    log: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)  # ToyParams.to_dict of the final parameters
    # Under a cap: the largest norm any projection met (see project_to_cap). At most the cap means the cap
    # never acted, so training under any cap >= peak_norm runs the same trajectory. None: uncapped/unknown.
    peak_norm: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("params", "provenance")}
        check = {"passed": self.passed, "worst_error": self.full_domain_worst_error, "worst_pair": self.worst_pair,
                 "max_norm": self.max_norm, "norms": self.norms, "L": self.L, "pairs": n_pairs(self.L),
                 "readout": self.readout}
        return {**copy.deepcopy(out), **copy.deepcopy(self.params), "check": check,
                "provenance": copy.deepcopy(self.provenance)}

    @classmethod
    def from_dict(cls, data: Any) -> TrainResult:
        result = super().from_dict(data)
        file = model.read_params(data)
        result.params = file.params.to_dict(file.cfg)
        return result

    def toy(self) -> tuple[ToyConfig, ToyParams]:
        """The trained model back as ``(cfg, params)``."""
        file = model.read_params(self.params, L=self.L)
        return file.cfg, file.params


# --- pure numerics -------------------------------------------------------------------------------------


def split_domain(L: int, test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """IID split of the full domain's pair indices: (train_idx, test_idx), int64, disjoint, covering it."""
    P = (L + 1) * (L + 2) // 2
    n_test = max(1, round(test_fraction * P))
    if n_test >= P:
        raise ConfigError("L", f"{{L:{L}}} has only {P} pairs: too few to hold out a test split of {test_fraction:g}; "
                               "use a larger {L}")
    perm = torch.randperm(P, generator=torch.Generator().manual_seed(10_007 * seed + 1))
    return perm[n_test:].sort().values, perm[:n_test].sort().values


def domain_edges(L: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs that fail first: the letter-free slice ``m = 0`` and the longest inputs ``n + m = L``.
    Returns ``n, m``: (2L + 1,) float64 each."""
    n = np.arange(L + 1, dtype=np.float64)
    return np.concatenate([n, n[:-1]]), np.concatenate([np.zeros(L + 1), L - n[:-1]])


def sample_pairs(L: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``k`` pairs drawn uniformly (with replacement) from the full domain: ``n, m`` (k,) float64."""
    rows = np.arange(L + 2)
    offsets = rows * (L + 1) - rows * (rows - 1) // 2  # index of pair (n, 0) in row-major order
    i = rng.integers(0, offsets[-1], k)
    n = np.searchsorted(offsets, i, side="right") - 1
    return n.astype(np.float64), (i - offsets[n]).astype(np.float64)


def log_score_scale(cfg: ToyConfig, p: ToyParams) -> float:
    """``s_b − s_s = τ z_b · (z_b − z_s)``, the log of the boundary's attention weight relative to one space."""
    with torch.no_grad():
        z = model.token_vectors(cfg, p)  # (3, d)
        return float(cfg.tau * (z[0] @ (z[0] - z[1])))


def spacing_ratio(cfg: ToyConfig, p: ToyParams, window: int | None = None) -> float:
    """Mean adjacent gap ``||h(n+1, 0) − h(n, 0)||`` over the highest counts divided by that over the lowest.

    Windows: ``n = 1..w`` (low) and ``n = L−w..L−1`` (high), ``w = max(1, round(L/10))`` unless given — the
    toy analogue of the LLM's 1–10 vs 91–100 windows. Below 1: high counts are packed closer together.
    """
    L = cfg.L
    w = window or max(1, round(L / 10))
    with torch.no_grad():
        n = torch.arange(L + 1, dtype=DTYPE)
        h = model.boundary_representation(cfg, p, n, torch.zeros_like(n))  # (L+1, d)
        gaps = torch.linalg.vector_norm(h[1:] - h[:-1], dim=1)  # (L,)  gaps[k] = ||h(k+1) - h(k)||
    low = gaps[1 : w + 1] if L > w else gaps
    high = gaps[L - w : L]
    return float(high.mean() / low.mean())


def exact_accuracy(cfg: ToyConfig, p: ToyParams, n: torch.Tensor, m: torch.Tensor) -> float:
    """Fraction of pairs counted exactly: ``|ŷ − n| < 1/2`` (regression) or argmax = n (classification)."""
    with torch.no_grad():
        return float((model.count_error(cfg, p, n, m) < (0.5 if cfg.readout == "regression" else 0.0))
                     .to(DTYPE).mean())


def loss_fn(cfg: ToyConfig, p: ToyParams, n: torch.Tensor, m: torch.Tensor, ce_scale: float = 1.0) -> torch.Tensor:
    """MSE to the count (regression) or cross-entropy over ``L + 1`` classes of ``ce_scale ×`` the scores
    (classification): scalar."""
    out = model.forward(cfg, p, n, m)
    if cfg.readout == "regression":
        return ((out - n) ** 2).mean()
    return torch.nn.functional.cross_entropy(ce_scale * out, n.long())


def params_digest(p: ToyParams) -> str:
    """A short digest of the parameters' exact values."""
    h = hashlib.sha256()
    for name, t in sorted(p.tensors().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# --- the trainer ---------------------------------------------------------------------------------------


class Trainer:
    """Stateful training of one ``(cfg, TrainConfig)`` run; :func:`train` is the usual entry point.

    ``init`` replaces the random initialisation (e.g. to continue from a shorter grid length's solution);
    it is projected to the cap before the first step.
    """

    def __init__(self, cfg: ToyConfig, tcfg: TrainConfig, init: ToyParams | None = None):
        if cfg.readout != "regression" and (tcfg.loss != "mse" or tcfg.working_set):
            raise ConfigError("readout", "the max-error {loss} and working-set training ({working_set}) are for the "
                                         "regression {readout}", also=("loss", "working_set"))
        self.cfg, self.tcfg = cfg, tcfg
        self.params = (init.detach() if init is not None
                       else model.init_params(cfg, seed=tcfg.seed, scale=tcfg.init_scale))
        self.peak_norm = project_to_cap(self.params, tcfg.cap) if tcfg.cap is not None else None
        self.init_digest = params_digest(self.params)
        for t in self.params.tensors().values():
            t.requires_grad_(True)
        self.coords = PolarCoordinates(self.params, tcfg.cap) if tcfg.parametrization == "polar" else None
        self.generator = torch.Generator().manual_seed(tcfg.seed + 99_991)
        self.rng = np.random.default_rng(tcfg.seed + 7_919)
        self.violators: tuple[np.ndarray, np.ndarray] | None = None  # worst pairs of the last full scan
        if tcfg.working_set:  # no per-pair tensors of the domain: L may be 10^4 (5·10^7 pairs)
            self.n = self.m = self.train_idx = self.test_idx = None
            en, em = domain_edges(cfg.L)
            rn, rm = sample_pairs(cfg.L, tcfg.working_set, self.rng)
            self._set_working_set(np.concatenate([en, rn]), np.concatenate([em, rm]))
        else:
            self.n, self.m = model.full_domain(cfg.L)  # (P,), (P,)
            self.train_idx, self.test_idx = split_domain(cfg.L, tcfg.test_fraction, tcfg.seed)
            self.pairs = PairSet.from_pairs(self.n[self.train_idx], self.m[self.train_idx])
        self.optimizer = self._make_optimizer()
        self.step_count = 0
        self.log: list[dict[str, Any]] = []

    def _make_optimizer(self) -> torch.optim.Optimizer:
        tensors = (self.coords.leaves(self.params) if self.coords is not None
                   else list(self.params.tensors().values()))
        if self.tcfg.optimizer == "lbfgs":
            return torch.optim.LBFGS(tensors, lr=self.tcfg.lr, max_iter=1, max_eval=25,
                                     history_size=self.tcfg.history_size, line_search_fn="strong_wolfe",
                                     tolerance_grad=0.0, tolerance_change=0.0)
        return torch.optim.Adam(tensors, lr=self.tcfg.lr)

    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed by this run."""
        c = self.cfg
        return {"variant": c.variant, "d": c.d, "L": c.L, "readout": c.readout, "tau": c.tau, "eps": c.eps,
                "init": self.init_digest, **self.tcfg.trajectory_key()}

    def _set_working_set(self, n: np.ndarray, m: np.ndarray) -> None:
        key = np.unique(n.astype(np.int64) * (self.cfg.L + 1) + m.astype(np.int64))  # sorted, no duplicates
        self.ws_n, self.ws_m = (key // (self.cfg.L + 1)).astype(np.float64), (key % (self.cfg.L + 1)).astype(np.float64)
        self.pairs = PairSet.from_pairs(self.ws_n, self.ws_m)

    def _grow(self) -> None:
        """After a failed check: the scan's worst pairs and as many random ones join the working set."""
        wn, wm = self.violators
        rn, rm = sample_pairs(self.cfg.L, self.tcfg.grow, self.rng)
        self._set_working_set(np.concatenate([self.ws_n, wn, rn]), np.concatenate([self.ws_m, wm, rm]))

    def _batch(self) -> PairSet:
        if self.tcfg.optimizer != "adam-minibatch" or self.tcfg.batch_size >= len(self.train_idx):
            return self.pairs
        pick = torch.randperm(len(self.train_idx), generator=self.generator)[: self.tcfg.batch_size]
        idx = self.train_idx[pick]
        return PairSet.from_pairs(self.n[idx], self.m[idx])

    def _loss(self, pairs: PairSet) -> tuple[float, dict[str, torch.Tensor]]:
        tc = self.tcfg
        return loss_and_grad(self.cfg, self.params, pairs, loss=tc.loss, beta=tc.beta, ce_scale=tc.ce_scale)

    def step(self) -> float:
        """One optimiser step (then projection to the cap); returns the loss before it."""
        pairs = self._batch()

        def closure() -> torch.Tensor:
            if self.coords is not None:
                self.coords.write(self.params)
            value, grads = self._loss(pairs)
            if self.coords is not None:
                self.coords.set_grads(self.params, grads)
            else:
                for name, t in self.params.tensors().items():  # inf: no gradient, the line search backs off
                    t.grad = grads[name] if grads else torch.zeros_like(t)
            return torch.tensor(value, dtype=DTYPE)

        loss = float(self.optimizer.step(closure).detach())
        self.step_count += 1
        if self.coords is not None:
            peak = self.coords.project(self.params)
            if self.tcfg.cap is not None:
                self.peak_norm = max(self.peak_norm, peak)
        elif self.tcfg.cap is not None:
            self.peak_norm = max(self.peak_norm, project_to_cap(self.params, self.tcfg.cap))
        if not math.isfinite(loss):
            raise TrainingDiverged(self.step_count, f"the loss is {loss}")
        for name, t in self.params.tensors().items():
            if not bool(torch.isfinite(t).all()):
                raise TrainingDiverged(self.step_count, f"parameter {name} holds NaN or inf")
        return loss

    def evaluate(self) -> dict[str, Any]:
        """Metrics at the current parameters (one log entry)."""
        cfg, p = self.cfg, self.params.detach()
        loss = self._loss(self.pairs)[0]
        if not math.isfinite(loss):
            raise TrainingDiverged(self.step_count, f"the loss is {loss}")
        check = full_domain_check(cfg, p)
        if self.tcfg.working_set:
            wn, wm, _, accuracy = worst_pairs(cfg, p, cfg.L, self.tcfg.grow)
            self.violators = (wn, wm)
        elif cfg.readout == "regression":
            test = PairSet.from_pairs(self.n[self.test_idx], self.m[self.test_idx])
            accuracy = float(np.mean(np.abs(residuals(cfg, p, test)) < 0.5))
        else:
            accuracy = exact_accuracy(cfg, p, self.n[self.test_idx], self.m[self.test_idx])
        log_a = log_score_scale(cfg, p)
        extra = {"working_set": len(self.pairs)} if self.tcfg.working_set else {}
        return {
            "step": self.step_count,
            "loss": loss,
            "test_exact_accuracy": accuracy,
            "full_domain_worst_error": float(check.worst_error),
            "worst_pair": [int(v) for v in check.worst_pair],
            "passed": bool(check.passed),
            "max_norm": p.max_norm(),
            "log_score_scale": log_a,
            "score_scale": math.exp(log_a) if log_a < 700 else math.inf,
            "spacing_ratio": spacing_ratio(cfg, p),
            **extra,
        }

    def stalled(self) -> bool:
        """Whether the last ``patience`` log steps all missed the best earlier worst error by less than 1 %."""
        k = int(self.tcfg.patience)
        if not k or len(self.log) <= k:
            return False
        worst = [e["full_domain_worst_error"] for e in self.log]
        return min(worst[-k:]) > 0.99 * min(worst[:-k])

    def run(self, progress: Callable[[int], None] | None = None,
            on_checkpoint: Callable[[Trainer], None] | None = None, checkpoint_every: int = 0) -> TrainResult:
        """Step until ``tcfg.steps`` (or the check passes, if asked); returns the final :class:`TrainResult`."""
        tc = self.tcfg
        stopped = bool(self.log) and ((tc.stop_when_passed and self.log[-1]["passed"]) or self.stalled())
        if not self.log:
            self.log.append(self.evaluate())
            stopped = tc.stop_when_passed and self.log[-1]["passed"]
            if tc.working_set and not self.log[-1]["passed"]:
                self._grow()
        while self.step_count < tc.steps and not stopped:
            self.step()
            if progress is not None:
                progress(1)
            if self.step_count % tc.log_every == 0 or self.step_count == tc.steps:
                self.log.append(self.evaluate())
                stopped = (tc.stop_when_passed and self.log[-1]["passed"]) or self.stalled()
                if tc.working_set and not self.log[-1]["passed"]:
                    self._grow()
            if on_checkpoint is not None and checkpoint_every and self.step_count % checkpoint_every == 0:
                on_checkpoint(self)
        if self.log[-1]["step"] != self.step_count:
            self.log.append(self.evaluate())
        return self.result(stopped_early=stopped and self.step_count < tc.steps)

    def result(self, stopped_early: bool = False) -> TrainResult:
        last = self.log[-1]
        p = self.params.detach()
        return TrainResult(
            variant=self.cfg.variant, d=self.cfg.d, L=self.cfg.L, readout=self.cfg.readout, tau=self.cfg.tau,
            train=asdict(self.tcfg), steps_run=self.step_count, stopped_early=stopped_early,
            test_exact_accuracy=last["test_exact_accuracy"],
            full_domain_worst_error=last["full_domain_worst_error"], worst_pair=last["worst_pair"],
            passed=last["passed"], max_norm=last["max_norm"], norms=p.vector_norms(), log=list(self.log),
            params=p.to_dict(self.cfg), peak_norm=self.peak_norm,
        )

    # --- checkpoints ---

    def state_dict(self) -> dict[str, Any]:
        return {"format": _CHECKPOINT_FORMAT, "fingerprint": self.fingerprint(), "step": self.step_count,
                "params": {k: v.detach().clone() for k, v in self.params.tensors().items()},
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                "log": self.log, "rng": self.rng.bit_generator.state,
                "working_set": (self.ws_n, self.ws_m) if self.tcfg.working_set else None,
                "peak_norm": self.peak_norm, "polar": None if self.coords is None else self.coords.state()}

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint") -> None:
        if not isinstance(state, dict) or state.get("format") != _CHECKPOINT_FORMAT:
            raise UsageError(f"{source} is not a countlens training checkpoint; delete it to start afresh")
        refuse_other_settings(source, "the training state of a different run", state.get("fingerprint"),
                              self.fingerprint(), field="checkpoint",
                              fix="rerun with that run's settings or delete the {field} file")
        with torch.no_grad():
            for name, t in self.params.tensors().items():
                t.copy_(state["params"][name])
        if self.coords is not None:
            self.coords.load(state["polar"], self.params)
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.rng.bit_generator.state = state["rng"]
        if self.tcfg.working_set:
            self._set_working_set(*state["working_set"])
        self.step_count = int(state["step"])
        self.log = list(state["log"])
        if self.peak_norm is not None:  # a checkpoint without it: as if the cap had acted
            self.peak_norm = state.get("peak_norm", math.inf)


def save_checkpoint(trainer: Trainer, path: str | Path) -> None:
    """Write the trainer's full state to ``path`` atomically."""
    buf = io.BytesIO()
    torch.save(trainer.state_dict(), buf)
    write_bytes_atomic(path, buf.getvalue())


def load_checkpoint(trainer: Trainer, path: str | Path) -> None:
    """Restore ``trainer`` from ``path``; :class:`UsageError` if it is unreadable or from another run."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a truncated or foreign file: report it, never a traceback
        raise UsageError(f"checkpoint {path} cannot be read ({type(exc).__name__}); delete it to start afresh") from None
    trainer.load_state_dict(state, source=f"checkpoint {path}")


def train(cfg: ToyConfig, tcfg: TrainConfig, init: ToyParams | None = None, checkpoint: str | Path | None = None,
          checkpoint_every: int = 0, progress: bool = False) -> TrainResult:
    """Train one run, resuming from ``checkpoint`` if that file exists and saving to it every
    ``checkpoint_every`` steps (and at the end). Raises :class:`TrainingDiverged` on NaN/inf."""
    trainer = Trainer(cfg, tcfg, init=init)
    if checkpoint is not None and Path(checkpoint).exists():
        load_checkpoint(trainer, checkpoint)
    bar = progress_bar(tcfg.steps, f"{cfg.variant} {cfg.readout} L={cfg.L} seed={tcfg.seed}", True, unit="step",
                       initial=min(trainer.step_count, tcfg.steps)) if progress else None
    saver = (lambda tr: save_checkpoint(tr, checkpoint)) if checkpoint is not None else None
    try:
        result = trainer.run(progress=bar.update if bar else None, on_checkpoint=saver,
                             checkpoint_every=checkpoint_every)
    finally:
        if bar is not None:
            bar.close()
    if saver is not None:
        saver(trainer)
    result.provenance = result_provenance({"model": cfg, "train": tcfg})
    return result


__all__ = [
    "OPTIMIZERS", "TrainConfig", "TrainResult", "TrainingDiverged", "Trainer", "train", "split_domain",
    "log_score_scale", "spacing_ratio", "exact_accuracy", "loss_fn", "save_checkpoint",
    "load_checkpoint", "params_digest", "PARAMETRIZATIONS",
]
