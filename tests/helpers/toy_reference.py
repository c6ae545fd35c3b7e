"""Independent references for the toy tests: one attention layer run over an explicit token sequence."""

from __future__ import annotations

import numpy as np
import torch

from countlens.toy.model import DTYPE, ToyConfig, ToyParams, init_params


def explicit_attention(cfg: ToyConfig, p: ToyParams, n: int, m: int,
                       rng: np.random.Generator | None = None) -> torch.Tensor:
    """Run one attention layer over an explicit sequence b, s*n, l*m (shuffled by ``rng`` if given); read out
    at the boundary: the regression output () or the class scores (L + 1,)."""
    kinds = np.array([0] + [1] * n + [2] * m)
    if rng is not None:
        rng.shuffle(kinds)  # any order: no positional encodings
    emb = torch.stack([p.x_b, p.x_s, p.x_l])[torch.as_tensor(kinds)]  # (T, d)
    if cfg.ln_place == "pre":
        centred = emb - emb.mean(dim=1, keepdim=True)
        emb = centred / torch.sqrt((centred**2).mean(dim=1, keepdim=True))
        if cfg.ln_learned:
            emb = p.gamma * emb + p.beta
    b_pos = int(np.flatnonzero(kinds == 0)[0])
    query = emb[b_pos]
    scores = cfg.tau * (emb @ query)  # (T,)
    weights = torch.softmax(scores, dim=0) if cfg.attention == "softmax" else scores
    o = weights @ emb  # (d,)
    if cfg.ln_place == "post":
        centred = o - o.mean()
        o = centred / torch.sqrt((centred**2).mean())
        if cfg.ln_learned:
            o = p.gamma * o + p.beta
    out = o @ p.w + p.b0 if cfg.readout == "regression" else p.U @ o + p.c
    return out.detach()


def explicit_outputs(cfg: ToyConfig, p: ToyParams, pairs: list[tuple[int, int]]) -> np.ndarray:
    """:func:`explicit_attention` for each (n, m): (P,) regression outputs or (P, L + 1) class scores."""
    return np.array([explicit_attention(cfg, p, n, m).numpy() for n, m in pairs])


def random_params(cfg: ToyConfig, seed: int, scale: float = 2.0) -> ToyParams:
    """Random parameters of every kind, LN gain/bias and read-out biases included (not the identity LN)."""
    p = init_params(cfg, seed=seed, scale=scale)
    g = torch.Generator().manual_seed(1000 + seed)
    if cfg.ln_learned:  # not the identity LN: random gain and bias
        p.gamma = 1.0 + torch.randn(cfg.d, generator=g, dtype=DTYPE)
        p.beta = torch.randn(cfg.d, generator=g, dtype=DTYPE)
    if cfg.readout == "regression":
        p.b0 = torch.randn((), generator=g, dtype=DTYPE)
    else:
        p.c = torch.randn(cfg.L + 1, generator=g, dtype=DTYPE)
    return p
