"""The toy model (docs/definitions.md §1): one attention layer counting, evaluated on count pairs.

Input is one boundary token ``b`` (the read-out position, attending to itself), ``n`` counted tokens ``s``
and ``m`` distractors ``l``. There are no positional encodings and no W_Q, W_K, W_V: each (possibly
normalised) embedding ``z_t`` is its own query, key and value. The boundary output therefore depends only on
``(n, m)``, and the attention output is always a mixture of the three token vectors,

    o(n, m) = λ_b z_b + λ_s z_s + λ_l z_l,

with mixing weights λ that this module computes in closed form per count pair — no sequence is built.
``tests/unit/test_toy_model.py`` checks this against explicit attention over shuffled token sequences.

Everything is float64 torch, so the same code serves the full-domain checker (under ``no_grad``) and the
trainer (under autograd). Scores reach 1e8 at norms of 1e4; the softmax weights are computed by
log-sum-exp over the three token groups, which stays exact there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from countlens.core.errors import ConfigError, UsageError
from countlens.core.fields import AtLeast, OneOf, Positive, check_fields

VARIANTS = (
    "linear",
    "linear-preln-bare",
    "softmax",
    "softmax-postln-bare",
    "softmax-postln-learned",
    "softmax-preln-learned",
    "softmax-preln-bare",
)
READOUTS = ("regression", "classification")
DTYPE = torch.float64


@dataclass(frozen=True)
class ToyConfig:
    """Everything that fixes the toy model's function class.

    variant: one of :data:`VARIANTS`. d: model dimension. L: maximum length (the domain is
    ``n, m >= 0, n + m <= L``; classification has ``L + 1`` classes). tau: score scale, ``1/sqrt(d)`` when
    ``None``. eps: LayerNorm epsilon (the theory uses 0).
    """

    variant: str
    """the model variant"""
    d: int
    """model dimension"""
    L: int
    """maximum length: the domain is n, m >= 0, n + m <= L"""
    readout: str = "regression"
    """the read-out head"""
    tau: float | None = None
    """score scale (default: 1/sqrt(d))"""
    eps: float = 0.0
    """LayerNorm epsilon (the theory uses 0)"""

    def __post_init__(self) -> None:
        check_fields(self, {"variant": OneOf(VARIANTS), "readout": OneOf(READOUTS), "d": AtLeast(1),
                            "L": AtLeast(1), "eps": Positive(zero=True)})
        if self.tau is None:
            object.__setattr__(self, "tau", 1.0 / math.sqrt(self.d))
        Positive()(self.tau, "tau")

    @property
    def attention(self) -> str:
        """``"linear"`` or ``"softmax"``."""
        return self.variant.split("-")[0]

    @property
    def ln_place(self) -> str:
        """``"none"``, ``"pre"`` or ``"post"``."""
        parts = self.variant.split("-")
        return parts[1][:-2] if len(parts) > 1 else "none"

    @property
    def ln_learned(self) -> bool:
        """Whether LayerNorm has a trainable gain ``γ`` and bias ``β``."""
        return self.variant.endswith("-learned")

    def with_L(self, L: int) -> ToyConfig:
        return replace(self, L=L)


@dataclass
class ToyParams:
    """The trainable vectors. Each (and each row of ``U``, each entry of ``c``, and ``b0``) is one "vector"
    for the per-vector norm bound ``B``.

    Shapes: ``x_b, x_s, x_l, w, gamma, beta``: (d,); ``b0``: (); ``U``: (L+1, d); ``c``: (L+1,).
    Regression uses ``w, b0``; classification uses ``U, c``; ``gamma, beta`` exist only where LN is learned.
    """

    x_b: torch.Tensor
    x_s: torch.Tensor
    x_l: torch.Tensor
    w: torch.Tensor | None = None
    b0: torch.Tensor | None = None
    gamma: torch.Tensor | None = None
    beta: torch.Tensor | None = None
    U: torch.Tensor | None = None
    c: torch.Tensor | None = None

    def tensors(self) -> dict[str, torch.Tensor]:
        """The parameters that are present, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def vector_norms(self) -> dict[str, float]:
        """ℓ2 norm of each trainable vector (for ``U`` the largest row norm, for ``c`` and ``b0`` the largest
        absolute value, since each class bias and the scalar bias count as 1-vectors)."""
        out = {}
        for name, t in self.tensors().items():
            t = t.detach()
            if name == "U":
                out[name] = float(torch.linalg.vector_norm(t, dim=1).max())
            elif t.dim() == 0 or name == "c":
                out[name] = float(t.abs().max())
            else:
                out[name] = float(torch.linalg.vector_norm(t))
        return out

    def max_norm(self) -> float:
        """The largest per-vector norm: the ``B`` these parameters need."""
        return max(self.vector_norms().values())

    def detach(self) -> ToyParams:
        return ToyParams(**{k: v.detach().clone() for k, v in self.tensors().items()})

    def to_dict(self, cfg: ToyConfig) -> dict[str, Any]:
        """The toy parameter-file schema (:func:`read_params`): the model's ``variant``, ``d``, ``tau``,
        ``readout`` and ``L``, then each vector present."""
        out: dict[str, Any] = {"variant": cfg.variant, "d": cfg.d, "tau": cfg.tau, "readout": cfg.readout, "L": cfg.L}
        for name, t in self.tensors().items():
            t = t.detach().cpu()
            out[name] = float(t) if t.dim() == 0 else t.tolist()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], L: int | None = None) -> tuple[ToyConfig, ToyParams]:
        """Parse :meth:`to_dict`'s layout, validating every shape; :class:`UsageError` if malformed. ``L``:
        the model's domain (a classifier's head fixes its own through ``U``). Files are read through
        :func:`read_params`, which also takes the full-domain check they carry."""
        if not isinstance(data, dict):
            raise UsageError("parameter file must hold a JSON object with keys variant, d, tau, x_b, x_s, x_l, ...")
        missing = [k for k in ("variant", "d", "x_b", "x_s", "x_l") if k not in data]
        if missing:
            raise UsageError(f"parameter file lacks key(s) {', '.join(missing)}")
        readout = data.get("readout", "classification" if "U" in data else "regression")
        try:
            d = int(data["d"])
        except (TypeError, ValueError):
            raise UsageError(f"parameter file: d must be an integer, got {data['d']!r}") from None
        if "U" in data and L is None:
            L = len(data["U"]) - 1
        try:
            cfg = ToyConfig(variant=data["variant"], d=d, L=int(L or 1), readout=readout, tau=data.get("tau"),
                            eps=float(data.get("eps", 0.0)))
        except ConfigError as exc:  # a value of the file, not of the caller's config
            raise UsageError(f"parameter file: {exc}") from None
        shapes = {"x_b": (d,), "x_s": (d,), "x_l": (d,)}
        if readout == "regression":
            shapes.update(w=(d,), b0=())
        else:
            shapes.update(U=(cfg.L + 1, d), c=(cfg.L + 1,))
        if cfg.ln_learned:
            shapes.update(gamma=(d,), beta=(d,))
        values = {}
        for name, shape in shapes.items():
            if name not in data:
                raise UsageError(f"parameter file lacks key {name!r} (needed by {cfg.variant}, {readout})")
            try:
                arr = np.asarray(data[name], dtype=np.float64)
            except (TypeError, ValueError):
                raise UsageError(f"parameter file: {name} must be numbers") from None
            if arr.shape != shape:
                raise UsageError(f"parameter file: {name} has shape {arr.shape}, expected {shape} for d={d}")
            if not np.all(np.isfinite(arr)):
                raise UsageError(f"parameter file: {name} holds NaN or inf")
            values[name] = torch.as_tensor(arr, dtype=DTYPE)
        return cfg, cls(**values)



@dataclass
class ParamsFile:
    """A toy parameter file read back: the model, its vectors, and the full-domain ``check`` that certified
    them where the file holds one (``None`` otherwise)."""

    cfg: ToyConfig
    params: ToyParams
    check: dict[str, Any] | None = None

    @property
    def passed(self) -> bool | None:
        """Whether the file's full-domain check passed (``None``: the file holds no check)."""
        passed = (self.check or {}).get("passed")
        return passed if isinstance(passed, bool) else None


def read_params(data: Any, L: int | None = None) -> ParamsFile:
    """The one reader of the toy parameter-file schema (docs/definitions.md §1): a JSON object holding
    :meth:`ToyParams.to_dict` at its top level (``variant``, ``d``, ``tau``, ``readout``, ``L``, the vectors)
    and, optionally, ``check``: the full-domain check that certified it (``passed``, ``worst_error``,
    ``worst_pair``, ``max_norm``, ``L``, ...). ``toy construct``, ``toy train`` and Table 3's attained
    parameters all write it.

    ``L``: the domain the model is evaluated on (a :class:`ConfigError` of the caller's field ``L`` when
    below 1); default the file's ``L`` (a classifier's head fixes its own through ``U``).
    :class:`UsageError` for anything else. Files of countlens 0.1's ``toy train``, which nested the vectors
    under ``"params"``, are read too.
    """
    if L is not None and int(L) < 1:
        raise ConfigError("L", f"{{L}} must be >= 1, got {L}")
    if isinstance(data, dict) and isinstance(data.get("params"), dict) and "x_b" not in data:
        data = {"L": data.get("L"), **data["params"], "check": data.get("check")}  # countlens 0.1 toy train
    if not isinstance(data, dict) or "x_b" not in data:
        raise UsageError("the parameter file holds no toy parameters (keys variant, d, x_b, x_s, x_l, ...); write "
                         "one with `countlens toy construct` or `countlens toy train`")
    if "U" in data:  # classification: the head fixes its own L; the model may be evaluated at another
        cfg, params = ToyParams.from_dict(data)
        cfg = cfg if L is None else cfg.with_L(int(L))
    else:
        if L is None and data.get("L") is None:
            raise ConfigError("L", "the parameter file does not say its maximum length; pass {L}")
        if L is None:
            try:
                L = int(data["L"])
            except (TypeError, ValueError):
                raise UsageError(f"parameter file: L must be an integer, got {data['L']!r}") from None
        cfg, params = ToyParams.from_dict(data, L=int(L))
    check = data.get("check")
    return ParamsFile(cfg, params, check if isinstance(check, dict) else None)


def full_domain(L: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every admissible pair ``n, m >= 0, n + m <= L``: two float64 tensors of shape ((L+1)(L+2)/2,)."""
    n, m = np.triu_indices(L + 1)  # (i, j) with i <= j  ->  n = i, m = j - i
    return torch.as_tensor(n, dtype=DTYPE), torch.as_tensor(m - n, dtype=DTYPE)


def layer_norm(v: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """``(v - mean(v)) / std(v)`` over the last axis, population std, ``eps`` added to the variance."""
    centred = v - v.mean(dim=-1, keepdim=True)
    var = (centred * centred).mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(var + eps)


def token_vectors(cfg: ToyConfig, p: ToyParams) -> torch.Tensor:
    """``z_b, z_s, z_l`` stacked: (3, d). Pre-LN is applied here (once per token type, not per position)."""
    x = torch.stack([p.x_b, p.x_s, p.x_l])  # (3, d)
    if cfg.ln_place != "pre":
        return x
    z = layer_norm(x, cfg.eps)
    return p.gamma * z + p.beta if cfg.ln_learned else z


def mixing_weights(cfg: ToyConfig, z: torch.Tensor, n: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """λ of ``o = λ_b z_b + λ_s z_s + λ_l z_l`` for each pair: (P, 3).

    Softmax: the boundary attends to itself (score ``s_b``), to n copies of ``s`` and m copies of ``l``, so
    the three group logits are ``s_b, s_s + log n, s_l + log m`` and λ is their softmax. Linear
    (unnormalised) attention: ``λ = (s_b, n s_s, m s_l)``.
    """
    scores = cfg.tau * (z @ z[0])  # (3,)  s_t = τ z_b · z_t
    counts = torch.stack([torch.ones_like(n), n, m], dim=-1)  # (P, 3)
    if cfg.attention == "linear":
        return counts * scores  # (P, 3)
    logits = scores + torch.log(counts)  # (P, 3); log 0 = -inf drops absent groups
    return torch.softmax(logits, dim=-1)  # (P, 3)


def attention_output(cfg: ToyConfig, p: ToyParams, n: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The boundary's attention output ``o(n, m)``: (P, d)."""
    z = token_vectors(cfg, p)  # (3, d)
    return mixing_weights(cfg, z, n, m) @ z  # (P, d)


def boundary_representation(cfg: ToyConfig, p: ToyParams, n: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``h(n, m)``, the vector the read-out sees (post-LN applied where the variant has it): (P, d)."""
    o = attention_output(cfg, p, n, m)  # (P, d)
    if cfg.ln_place != "post":
        return o
    h = layer_norm(o, cfg.eps)
    return p.gamma * h + p.beta if cfg.ln_learned else h


def readout(cfg: ToyConfig, p: ToyParams, h: torch.Tensor) -> torch.Tensor:
    """Regression: ``ŷ = w · h + b0``, (P,). Classification: scores ``U h + c``, (P, L+1)."""
    if cfg.readout == "regression":
        return h @ p.w + p.b0  # (P,)
    return h @ p.U.T + p.c  # (P, L+1)


def forward(cfg: ToyConfig, p: ToyParams, n: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Read-out at every pair: ``ŷ`` (P,) for regression, class scores (P, L+1) for classification."""
    return readout(cfg, p, boundary_representation(cfg, p, n, m))


def count_error(cfg: ToyConfig, p: ToyParams, n: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Regression: ``|ŷ - n|`` (rounding-exact iff < 1/2). Classification: the winning score gap's negative
    (true-class score minus best other score, negated), so "passed" means ``< 0`` there. Shape (P,)."""
    out = forward(cfg, p, n, m)
    if cfg.readout == "regression":
        return (out - n).abs()
    return -winning_gap(out, n)


def winning_gap(scores: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """True class's score minus the best other class's score: (P,). Positive means the argmax is right."""
    idx = n.long().unsqueeze(1)  # (P, 1)
    true = scores.gather(1, idx).squeeze(1)  # (P,)
    others = scores.scatter(1, idx, float("-inf"))  # (P, L+1)
    return true - others.max(dim=1).values


def init_params(cfg: ToyConfig, seed: int = 0, scale: float = 1.0) -> ToyParams:
    """Random initialisation: every vector entry N(0, scale²/d), so each vector has norm ≈ ``scale``;
    LN gain starts at 1 and bias at 0, biases at 0."""
    g = torch.Generator().manual_seed(seed)

    def vec(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=DTYPE) * (scale / math.sqrt(cfg.d))

    p = ToyParams(x_b=vec(cfg.d), x_s=vec(cfg.d), x_l=vec(cfg.d))
    if cfg.readout == "regression":
        p.w, p.b0 = vec(cfg.d), torch.zeros((), dtype=DTYPE)
    else:
        p.U, p.c = vec(cfg.L + 1, cfg.d), torch.zeros(cfg.L + 1, dtype=DTYPE)
    if cfg.ln_learned:
        p.gamma, p.beta = torch.ones(cfg.d, dtype=DTYPE), torch.zeros(cfg.d, dtype=DTYPE)
    return p


__all__ = [
    "VARIANTS", "READOUTS", "ToyConfig", "ToyParams", "ParamsFile", "read_params", "full_domain", "layer_norm", "token_vectors",
    "mixing_weights", "attention_output", "boundary_representation", "readout", "forward", "count_error",
    "winning_gap", "init_params",
]
