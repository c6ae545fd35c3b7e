"""Write the toy's boundary representations in the activation data-set format of LLM captures.

One row per admissible count pair ``n, m >= 0, n + m <= L``, with two locations:

    attn_out   o(n, m), the attention output at the boundary
    h          h(n, m), what the read-out sees (post-LN applied where the variant has it; = o otherwise)

and the columns of :mod:`countlens.core.store` filled as a toy "prompt" would: ``pair="toy"``,
``config=<variant>``, ``seed=<seed>``, ``prompt=""``, ``boundary_index=0``, ``n_tokens=1+n+m``. Values are
stored as float64 (softmax compresses high counts to spacings far below float32 resolution at large L).
Every probe and geometry command therefore runs on toy parameters — constructed or trained — unchanged.
Parameter files are read by :func:`countlens.toy.model.read_params`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from countlens.core.capture import Capture
from countlens.core.errors import ConfigError, UsageError
from countlens.core.io import config_digest, provenance
from countlens.core.pool import progress_bar
from countlens.core.store import ActivationWriter
from countlens.toy.model import ToyConfig, ToyParams, attention_output, boundary_representation, full_domain

LOCATIONS = ("attn_out", "h")
SHARD_ROWS = 50_000


def export_toy_activations(cfg: ToyConfig, params: ToyParams, out_dir: str | os.PathLike, L: int | None = None,
                           seed: int = 0, progress: bool = False) -> Path:
    """Write ``attn_out`` and ``h`` at every admissible pair up to ``L`` (default ``cfg.L``) as a capture
    folder; return the folder. A finished folder with the same settings is left as it is (resume);
    one with other settings is refused by :class:`countlens.core.store.ActivationWriter` (through
    :func:`countlens.core.cache.refuse_other_settings`).
    """
    L = int(cfg.L if L is None else L)
    if L < 1:
        raise ConfigError("L", f"{{L}} must be >= 1, got {L}")
    cfg = cfg.with_L(L)
    out_dir = Path(out_dir)
    param_dict = params.to_dict(cfg)
    # the digest of the model and its vectors; the domain L is a setting of its own (and was never in it)
    vectors = {k: v for k, v in param_dict.items() if k != "L"}
    settings = {"variant": cfg.variant, "d": cfg.d, "tau": cfg.tau, "eps": cfg.eps, "L": L, "seed": int(seed),
                "params_sha256": config_digest(vectors, length=16)}
    meta = {"model": "toy", "source": "toy", "locations": list(LOCATIONS), "d": cfg.d, "dtype": "float64",
            "L": L, "variant": cfg.variant, "settings": settings, "params": param_dict,
            "provenance": provenance(settings)}
    writer = ActivationWriter(out_dir, meta)
    if Capture.from_folder(out_dir).meta.complete:
        return out_dir
    n_all, m_all = full_domain(L)  # (P,), (P,)
    done = writer.finished_shards()
    starts = range(0, len(n_all), SHARD_ROWS)
    with progress_bar(len(starts), "toy representations", progress) as bar:
        for index, start in enumerate(starts):
            bar.update(1)
            if index in done:
                continue
            n, m = n_all[start:start + SHARD_ROWS], m_all[start:start + SHARD_ROWS]
            with torch.no_grad():
                o = attention_output(cfg, params, n, m)  # (P, d)
                h = boundary_representation(cfg, params, n, m)  # (P, d)
            acts = torch.stack([o, h], dim=1).numpy()  # (P, 2, d)
            if not np.all(np.isfinite(acts)):
                raise UsageError("these parameters give NaN or inf representations (LayerNorm of a constant "
                                 "vector with eps = 0?); check the parameter file")
            ni, mi = n.numpy().astype(int), m.numpy().astype(int)
            rows = len(ni)
            writer.write_shard(index, {
                "acts": acts, "n": ni.tolist(), "m": mi.tolist(), "pair": ["toy"] * rows,
                "config": [cfg.variant] * rows, "seed": [int(seed)] * rows, "prompt": [""] * rows,
                "boundary_index": [0] * rows, "n_tokens": (1 + ni + mi).tolist(),
            })
    writer.finish({"rows": int(len(n_all))})
    return out_dir
