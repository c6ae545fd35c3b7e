"""Write the toy's boundary representations in the activation data-set format of LLM captures.

One row per admissible count pair ``n, m >= 0, n + m <= L``, with two locations:

    attn_out   o(n, m), the attention output at the boundary
    h          h(n, m), what the read-out sees (post-LN applied where the variant has it; = o otherwise)

and the columns of :mod:`countlens.core.store` filled as a toy "prompt" would: ``pair="toy"``,
``config=<variant>``, ``seed=<seed>``, ``prompt=""``, ``boundary_index=0``, ``n_tokens=1+n+m``. Values are
stored as float64 (softmax compresses high counts to spacings far below float32 resolution at large L).
Every probe and geometry command therefore runs on toy parameters — constructed or trained — unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from countlens.core.errors import UsageError
from countlens.core.io import config_digest, provenance
from countlens.core.store import ActivationWriter, read_meta
from countlens.toy.model import ToyConfig, ToyParams, attention_output, boundary_representation, full_domain

LOCATIONS = ("attn_out", "h")
SHARD_ROWS = 50_000


def toy_params_from_json(data: Any, L: int | None = None) -> tuple[ToyConfig, ToyParams]:
    """Parse toy parameters from any of our JSON outputs: the flat format of ``countlens toy construct``,
    or that format nested under a ``"params"`` key (training outputs). ``L`` is taken from the argument,
    else from an ``"L"`` key of the parameters, of the outer document, or of its ``"config"``;
    classification parameters carry it in ``U``. :class:`UsageError` when none gives it.
    """
    if not isinstance(data, dict):
        raise UsageError("the parameter file must hold a JSON object (the output of `countlens toy construct` "
                         "or `countlens toy train`)")
    params = data.get("params", data)
    if not isinstance(params, dict) or "x_b" not in params:
        raise UsageError("the parameter file holds no toy parameters (keys x_b, x_s, x_l, ... at the top level "
                         "or under 'params')")
    if L is None:
        for source in (params, data, data.get("config") if isinstance(data.get("config"), dict) else {}):
            if source.get("L") is not None:
                L = int(source["L"])
                break
    if "U" in params:  # classification: the head fixes its own L; representations may go to another L
        cfg, p = ToyParams.from_dict(params)
        return (cfg if L is None else cfg.with_L(L)), p
    if L is None:
        raise UsageError("the parameter file does not say its maximum length; pass --L")
    return ToyParams.from_dict(params, L=L)


def export_toy_activations(cfg: ToyConfig, params: ToyParams, out_dir: str | os.PathLike, L: int | None = None,
                           seed: int = 0, progress: bool = False) -> Path:
    """Write ``attn_out`` and ``h`` at every admissible pair up to ``L`` (default ``cfg.L``) as a capture
    folder; return the folder. A finished folder with the same settings is left as it is (resume);
    one with other settings is refused by :class:`countlens.core.store.ActivationWriter` (through
    :func:`countlens.core.cache.refuse_other_settings`).
    """
    L = int(cfg.L if L is None else L)
    if L < 1:
        raise UsageError(f"L must be >= 1, got {L}")
    cfg = cfg.with_L(L)
    out_dir = Path(out_dir)
    param_dict = params.to_dict(cfg)
    settings = {"variant": cfg.variant, "d": cfg.d, "tau": cfg.tau, "eps": cfg.eps, "L": L, "seed": int(seed),
                "params_sha256": config_digest(param_dict, length=16)}
    meta = {"model": "toy", "source": "toy", "locations": list(LOCATIONS), "d": cfg.d, "dtype": "float64",
            "L": L, "variant": cfg.variant, "settings": settings, "params": param_dict,
            "provenance": provenance(settings)}
    writer = ActivationWriter(out_dir, meta)
    if read_meta(out_dir).get("complete"):
        return out_dir
    n_all, m_all = full_domain(L)  # (P,), (P,)
    done = writer.finished_shards()
    starts = range(0, len(n_all), SHARD_ROWS)
    from tqdm.auto import tqdm

    for index, start in enumerate(tqdm(starts, desc="toy representations", disable=not progress)):
        if index in done:
            continue
        n, m = n_all[start:start + SHARD_ROWS], m_all[start:start + SHARD_ROWS]
        with torch.no_grad():
            o = attention_output(cfg, params, n, m)  # (P, d)
            h = boundary_representation(cfg, params, n, m)  # (P, d)
        acts = torch.stack([o, h], dim=1).numpy()  # (P, 2, d)
        if not np.all(np.isfinite(acts)):
            raise UsageError("these parameters give NaN or inf representations (LayerNorm of a constant vector "
                             "with eps = 0?); check the parameter file")
        ni, mi = n.numpy().astype(int), m.numpy().astype(int)
        rows = len(ni)
        writer.write_shard(index, {
            "acts": acts, "n": ni.tolist(), "m": mi.tolist(), "pair": ["toy"] * rows,
            "config": [cfg.variant] * rows, "seed": [int(seed)] * rows, "prompt": [""] * rows,
            "boundary_index": [0] * rows, "n_tokens": (1 + ni + mi).tolist(),
        })
    writer.finish({"rows": int(len(n_all))})
    return out_dir
