"""Direct logit attribution at the assistant boundary (Figure 14; docs/definitions.md §2.14).

The last block's output at the boundary is a sum of writes: ``h_L = e + Σ_b (a_b + m_b)``, ``e`` the input
of block 0 (the embeddings, positions and any embedding scaling included), ``a_b`` and ``m_b`` what block
``b``'s attention and MLP add to the residual stream (the hook sites ``attn_out`` / ``mlp_out`` of
:mod:`countlens.llm.hooks`). Each attention write splits further into its heads' shares: the output
projection is linear, so head ``h``'s share is the projection of its own slice of the projection's input
(``attn_z``) alone, and the shares sum to the write minus the projection's bias.

**Frozen read-out.** The logits are ``cap(scale · U · N(h_L) + bias)``: ``N`` the final norm, ``U`` the
unembedding. ``N(x) = k(x) · g ⊙ P x + β`` (``P`` centres for a LayerNorm and is the identity for an
RMSNorm; ``g`` the gain, Gemma's ``1 + w`` included; ``β`` the shift); with its scale ``k`` frozen at the real
``h_L`` it is linear, and so is the soft-capping ``cap(x) = c · tanh(x / c)`` with its slope frozen at the real
pre-cap logit (``cap(x) = s · x``, ``s = c · tanh(x / c) / x``). A component ``c`` then writes
``s_t · scale · U_t · (k · g ⊙ P c)`` to token ``t``'s logit, and the constants ``s_t · (scale · U_t · β +
bias_t)`` (the ``bias`` row: zero for an RMSNorm without an unembedding bias) complete the sum: the
components add up to the model's own logits exactly. A norm *inside* a block after its attention (Gemma-2/3,
OLMo-2) is frozen the same way at the block's real projection output, so the heads' shares pass through it.

What it cannot show: it is linear at one point. A component's attribution is what it writes directly, read
with everyone else's scale; one that writes nothing directly can still matter through later components
(a head whose output a later MLP reads), and removing a component moves the scale the others are read with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from countlens.llm.capture.residuals import find_blocks
from countlens.llm.hooks import HookSet, hook_sites

PROBE_SIZE = 100.0  # the gain of an RMSNorm is read off N(100 · 1): its eps is then 1e-4 of the squared scale or less
FIT_TOLERANCE = 1e-3  # relative residual of N(x) − β against k · g ⊙ P x above which a norm is not of that form


# ------------------------------------------------------------------------------------------ the frozen norm


@dataclass
class FrozenNorm:
    """A norm ``N(x) = k · g ⊙ P x + β`` with its scale ``k`` frozen at real vectors: ``gain`` ``g`` (d,),
    ``shift`` ``β`` (d,), ``centred`` (``P`` subtracts the mean), ``scale`` (N,) one ``k`` per real vector
    (float64 arrays)."""

    gain: np.ndarray
    shift: np.ndarray
    centred: bool
    scale: np.ndarray

    def linear(self, c: np.ndarray) -> np.ndarray:
        """``k · g ⊙ P c`` of the writes ``c`` (N, ..., d), row ``i`` read with ``scale[i]`` (no shift)."""
        c = np.asarray(c, dtype=np.float64)
        if self.centred:
            c = c - c.mean(axis=-1, keepdims=True)
        k = self.scale.reshape((-1,) + (1,) * (c.ndim - 1))
        return k * self.gain * c


def is_norm(module) -> bool:
    """Whether ``module`` is a normalisation layer (a LayerNorm or an RMSNorm of any family)."""
    import torch

    return isinstance(module, torch.nn.LayerNorm) or "norm" in type(module).__name__.lower()


def frozen_norm(norm, x) -> FrozenNorm:
    """:class:`FrozenNorm` of the module ``norm`` with its scale frozen at each row of ``x`` (N, d) (a tensor
    on the module's device). The gain and shift are read from the module itself (a LayerNorm's parameters; an
    RMSNorm's output at ``100 · 1`` and at 0), the scale by least squares of ``N(x) − β`` on ``g ⊙ P x``;
    ``ValueError`` naming the module's class for a norm that is not of this form."""
    import torch

    p = next(norm.parameters(), None)
    device, dtype = (p.device, p.dtype) if p is not None else (x.device, x.dtype)
    d = x.shape[-1]
    with torch.no_grad():
        centred = isinstance(norm, torch.nn.LayerNorm)
        if centred:
            gain = norm.weight if norm.weight is not None else torch.ones(d)
            shift = norm.bias if norm.bias is not None else torch.zeros(d)
        else:
            shift = norm(torch.zeros(1, d, device=device, dtype=dtype))[0]
            # N(t·1) = g · t / sqrt(t² + eps) = g to within eps / (2 t²)
            gain = norm(torch.full((1, d), PROBE_SIZE, device=device, dtype=dtype))[0] - shift
        out = norm(x.to(device, dtype))
    g, b = (t.detach().double().cpu().numpy() for t in (gain, shift))
    y = out.detach().double().cpu().numpy() - b  # (N, d)
    v = x.detach().double().cpu().numpy()
    if centred:
        v = v - v.mean(axis=-1, keepdims=True)
    v = g * v
    k = np.einsum("nd,nd->n", y, v) / np.maximum(np.einsum("nd,nd->n", v, v), np.finfo(np.float64).tiny)
    misfit = np.linalg.norm(y - k[:, None] * v, axis=1) / np.maximum(np.linalg.norm(y, axis=1), 1e-30)
    if np.any(misfit > FIT_TOLERANCE):
        raise ValueError(f"{type(norm).__name__} is not a norm k·g⊙x + β (relative misfit {misfit.max():.2g}): its "
                         "scale cannot be frozen")
    return FrozenNorm(g, b, centred, k)


def capped_slopes(x: np.ndarray, softcap: float | None) -> np.ndarray:
    """``s = c · tanh(x / c) / x`` of pre-cap logits ``x`` (any shape): the soft-capping ``c · tanh(x / c)``
    as a slope frozen at ``x`` (1 without capping, and at ``x = 0``)."""
    x = np.asarray(x, dtype=np.float64)
    if not softcap:
        return np.ones_like(x)
    safe = np.where(x == 0, 1.0, x)
    return np.where(x == 0, 1.0, softcap * np.tanh(safe / softcap) / safe)


# ------------------------------------------------------------------------------------------ attribution


@dataclass
class TokenReadout:
    """The read-out of a few tokens per row: ``rows`` (N, T, d) their unembedding rows, ``bias`` (N, T) their
    unembedding bias (0 without), ``scale`` the model's logit scaling, ``softcap`` its soft-capping (or
    ``None``)."""

    rows: np.ndarray
    bias: np.ndarray
    scale: float = 1.0
    softcap: float | None = None


def token_parts(writes: np.ndarray, norm: FrozenNorm, read: TokenReadout) -> tuple[np.ndarray, np.ndarray]:
    """Pre-cap logit parts of the writes (N, K, d) for each row's T tokens: ``(parts (N, K, T), constant
    (N, T))``, ``scale · U_t · (k · g ⊙ P c)`` and ``scale · (U_t · β + bias_t)`` (nats)."""
    lin = norm.linear(writes)  # (N, K, d)
    parts = read.scale * np.einsum("nkd,ntd->nkt", lin, read.rows)
    constant = read.scale * (np.einsum("d,ntd->nt", norm.shift, read.rows) + read.bias)
    return parts, constant


def attributed_differences(parts: np.ndarray, constant: np.ndarray, softcap: float | None, a: int, b: int,
                           total_parts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each write's share of the logit difference between token columns ``a`` and ``b``: ``(shares (N, K),
    constant (N,))`` in nats, each token's part multiplied by its capped slope at the full pre-cap logit
    (the sum of ``total_parts`` (N, K', T) — default ``parts`` — and ``constant``), so that the shares and
    the constant of a complete set of writes sum to the capped logit difference."""
    full = (parts if total_parts is None else total_parts).sum(axis=1) + constant  # (N, T) pre-cap logits
    s = capped_slopes(full, softcap)  # (N, T)
    shares = parts[..., a] * s[:, None, a] - parts[..., b] * s[:, None, b]
    return shares, constant[:, a] * s[:, a] - constant[:, b] * s[:, b]


def head_shares(projection, z, n_heads: int):
    """Each head's share of the output projection: ``(shares (N, H, d_out), bias (d_out,))`` of the
    projection's inputs ``z`` (N, H · head_dim) (tensors), head ``h``'s share the projection of its own slice
    alone minus the projection of zero (its bias), so that ``Σ_h shares + bias = projection(z)``."""
    import torch

    N, width = z.shape
    hd = width // n_heads
    blocks = torch.zeros(N, n_heads, n_heads, hd, dtype=z.dtype, device=z.device)  # (N, H, H, hd)
    index = torch.arange(n_heads, device=z.device)
    blocks[:, index, index] = z.view(N, n_heads, hd)
    with torch.no_grad():
        bias = projection(torch.zeros(1, width, dtype=z.dtype, device=z.device))[0]
        shares = projection(blocks.view(N * n_heads, width)).view(N, n_heads, -1) - bias
    return shares, bias


# ------------------------------------------------------------------------------------------ the pass


class ComponentPass:
    """Context manager: every block's writes at the boundary (the last position of a left-padded batch) in
    one prompt pass — the input of block 0, each attention and MLP write (``attn_out`` / ``mlp_out`` sites),
    each attention output projection's input (``attn_z``) and the last block's output — all hooks through
    one :class:`~countlens.llm.hooks.HookSet`, removed on exit.

    >>> with ComponentPass(model, sites) as rec:
    ...     model(ids, attention_mask=mask)
    >>> rec.embed, rec.attn, rec.mlp, rec.z, rec.last   # (B, d), (B, L, d), (B, L, d), (B, L, H*hd), (B, d)
    """

    def __init__(self, model, attn_out: str, mlp_out: str, attn_z: str):
        self.blocks = find_blocks(model)
        L = len(self.blocks)
        self.kinds = {"attn": hook_sites(range(L), L, attn_out), "mlp": hook_sites(range(L), L, mlp_out),
                      "z": hook_sites(range(L), L, attn_z)}
        self.ends = hook_sites([0, L], L)
        self._hooks = HookSet(self.blocks)
        self._seen: dict[tuple[str, int], Any] = {}

    def _keep(self, key: tuple[str, int]):
        def keep(hidden):
            self._seen[key] = hidden[:, -1].detach().clone()
        return keep

    def __enter__(self) -> ComponentPass:
        self._seen = {}
        hooks = [(site, self._keep((kind, b))) for kind, sites in self.kinds.items() for b, site in enumerate(sites)]
        hooks += [(self.ends[0], self._keep(("embed", 0))), (self.ends[1], self._keep(("last", 0)))]
        self._hooks.attach(hooks)
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.remove()

    def _stack(self, kind: str):
        import torch

        L = len(self.blocks)
        missing = [b for b in range(L) if (kind, b) not in self._seen]
        if missing:
            raise RuntimeError(f"the {kind} hook of block {missing[0]} did not fire")
        return torch.stack([self._seen[(kind, b)] for b in range(L)], dim=1)

    @property
    def embed(self):
        return self._seen[("embed", 0)]

    @property
    def last(self):
        return self._seen[("last", 0)]

    @property
    def attn(self):
        return self._stack("attn")

    @property
    def mlp(self):
        return self._stack("mlp")

    @property
    def z(self):
        return self._stack("z")


@dataclass
class BoundaryWrites:
    """One batch's boundary decomposition (float64): ``writes`` (N, 1 + 2L, d) — the embeddings, then each
    block's attention and MLP writes in the order a0, m0, a1, m1, … — ``heads`` (N, L, H, d) each head's share
    of its block's attention write (through the block's frozen post-attention norm where it has one),
    ``head_bias`` (N, L, d) the rest of each attention write (the projection's bias through that norm),
    ``last`` (N, d) the last block's real output."""

    writes: np.ndarray
    heads: np.ndarray
    head_bias: np.ndarray
    last: np.ndarray


def boundary_writes(model, rec: ComponentPass, n_heads: int) -> BoundaryWrites:
    """The :class:`BoundaryWrites` of the pass ``rec`` just recorded on ``model``: the heads' shares from each
    block's projection input (:func:`head_shares`), passed through the block's post-attention norm with its
    scale frozen at the real projection output where the attention write is a norm's output."""
    import torch

    blocks = rec.blocks
    attn, mlp, z = rec.attn, rec.mlp, rec.z  # (N, L, d), (N, L, d), (N, L, H*hd)
    heads, rests = [], []
    for b, block in enumerate(blocks):
        projection = block.get_submodule(_projection_path(rec, b))
        shares, bias = head_shares(projection, z[:, b], n_heads)  # (N, H, d), (d,)
        writer = block.get_submodule(rec.kinds["attn"][b].module)
        if is_norm(writer):
            with torch.no_grad():
                frozen = frozen_norm(writer, projection(z[:, b]))
            heads.append(frozen.linear(shares.double().cpu().numpy()))
            rests.append(frozen.linear(np.broadcast_to(bias.double().cpu().numpy(), (len(z), bias.shape[-1])))
                         + frozen.shift)
        else:
            heads.append(shares.double().cpu().numpy())
            rests.append(np.broadcast_to(bias.double().cpu().numpy(), (len(z), bias.shape[-1])))
    pieces = [rec.embed[:, None]] + [t for b in range(len(blocks)) for t in (attn[:, b:b + 1], mlp[:, b:b + 1])]
    writes = torch.cat(pieces, dim=1).double().cpu().numpy()
    return BoundaryWrites(writes, np.stack(heads, axis=1), np.stack(rests, axis=1), rec.last.double().cpu().numpy())


def _projection_path(rec: ComponentPass, block: int) -> str:
    return rec.kinds["z"][block].module


def first_token_rows(head, tokens: Sequence[Sequence[int]]) -> TokenReadout:
    """:class:`TokenReadout` of the token ids ``tokens`` (N, T) through the model's output ``head``
    (:class:`countlens.llm.lens.OutputHead`)."""
    w = head.weight.detach()
    ids = np.asarray(tokens, dtype=np.int64)
    rows = w[ids.ravel()].double().cpu().numpy().reshape(*ids.shape, -1)
    bias = getattr(head.unembedding, "bias", None)
    b = np.zeros(ids.shape) if bias is None else bias.detach().double().cpu().numpy()[ids]
    return TokenReadout(rows, b, float(head.scale), head.softcap)


__all__ = ["FrozenNorm", "is_norm", "frozen_norm", "capped_slopes", "TokenReadout", "token_parts",
           "attributed_differences", "head_shares", "ComponentPass", "BoundaryWrites", "boundary_writes",
           "first_token_rows"]
