"""A synthetic capture folder for the geometry, compare and probe tests, and the result round trip they
check."""

from __future__ import annotations

import json

import numpy as np

from countlens.core.store import ActivationWriter

PNG = b"\x89PNG\r\n\x1a\n"


def write_capture(path, counts, seeds=(0, 1), reps=2, n_loc=4, d=6, pairs=("a", "b")):
    """A synthetic capture: the count is encoded along a curve, plus per-prompt noise. Returns the arrays."""
    rng = np.random.default_rng(0)
    curve = rng.normal(size=(3, n_loc, d))
    rows = [(s, c, p) for s in seeds for c in counts for p in pairs for _ in range(reps)]
    n = np.array([c for _, c, _ in rows])
    t = np.sqrt(n)[:, None, None]
    acts = t * curve[0] + np.sin(t) * curve[1] + 0.05 * rng.normal(size=(len(rows), n_loc, d))
    writer = ActivationWriter(path, {"locations": ["embed"] + [f"blocks.{i}.hook_resid_post" for i in
                                                               range(n_loc - 1)], "d": d, "model": "synthetic",
                                     "settings": {"synthetic": True}})
    writer.write_shard(0, {
        "acts": acts, "n": n.tolist(), "m": [0] * len(rows), "pair": [p for *_, p in rows],
        "config": ["c0"] * len(rows), "seed": [s for s, _, _ in rows], "prompt": [""] * len(rows),
        "boundary_index": [0] * len(rows), "n_tokens": (n + 1).tolist()})
    writer.finish()
    return acts, n, np.array([s for s, _, _ in rows])


def assert_round_trip(result):
    """``type(result).from_dict`` of its JSON document (through ``json``) equals ``result`` field for field,
    and the document it writes again is the same. Returns the result read back."""
    again = type(result).from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(result.to_dict(), sort_keys=True)
    return again
