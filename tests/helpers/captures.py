"""Synthetic capture folders for the geometry, compare and probe tests (a boundary capture, one with the
answer as a distribution over counts, an items capture), and the result round trip they check."""

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


def write_answer_capture(path, counts=range(0, 13), per_count=6, d=5, capacity=3, seed=0):
    """A boundary capture with the model's answers as a distribution over the candidate counts: the greedy
    answer is right for ``n <= capacity`` and "1" above; the distribution puts its mode on ``n`` for
    ``n <= capacity + 2`` (so the rank-1 capacity is ``capacity + 2``) and on 1 above. Returns (n, answer,
    expected, rank) as arrays."""
    rng = np.random.default_rng(seed)
    counts = list(counts)
    candidates = np.arange(min(counts), max(counts) + 1)
    n = np.repeat(np.array(counts), per_count)
    rows = len(n)
    answer = np.where(n <= capacity, n, 1)
    mode = np.where(n <= capacity + 2, n, 1)
    logits = -0.5 * (candidates[None, :] - mode[:, None]) ** 2 + 0.01 * rng.normal(size=(rows, len(candidates)))
    logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    p = np.exp(logprobs)
    expected = p @ candidates
    correct = logprobs[np.arange(rows), n - candidates[0]]
    rank = 1 + (logprobs > correct[:, None]).sum(axis=1)
    acts = (n[:, None, None] * rng.normal(size=(1, 2, d)) + 0.1 * rng.normal(size=(rows, 2, d)))
    writer = ActivationWriter(path, {"locations": ["embed", "blocks.0.hook_resid_post"], "d": d, "model": "synthetic",
                                     "settings": {"synthetic": "answers"},
                                     "answer_candidates": candidates.tolist()})
    writer.write_shard(0, {
        "acts": acts, "n": n.tolist(), "m": [0] * rows, "pair": ["a"] * rows, "config": ["c0"] * rows,
        "seed": [0] * rows, "prompt": [""] * rows, "boundary_index": [0] * rows, "n_tokens": (n + 1).tolist(),
        "answer_text": [str(a) for a in answer], "answer": answer.tolist(), "answer_logprob": correct.tolist(),
        "answer_logprobs": logprobs.tolist(), "answer_expected": expected.tolist(), "answer_rank": rank.tolist()})
    writer.finish({"n_rows": rows})
    return n, answer.astype(float), expected, rank


ITEM_LOCATIONS = ["embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def write_items_capture(path, counts=range(0, 9), distractors=(0, 3, 6), reps=4, d=8, seed=0, shards=2,
                        noise=0.05):
    """An items capture (one row per item, then the boundary row, per prompt) of prompts with ``n`` in
    ``counts`` targets and ``m`` in ``distractors`` distractors, shuffled. The three locations: ``embed``
    holds only whether the item is a target (no count); after block 1 the running count along one
    direction (a counter); after block 2 the final count n along another (at every row). Rows of a prompt
    are written in one shard. Returns a dict of the row columns as arrays and ``acts`` (rows, 3, d)."""
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(3, d))
    columns = {k: [] for k in ("prompt_id", "position", "item_index", "is_target", "running_count", "n", "m")}
    prompt = 0
    for n in counts:
        for m in distractors:
            for _ in range(reps):
                if n + m == 0:
                    continue
                targets = rng.permutation(np.r_[np.ones(n, dtype=bool), np.zeros(m, dtype=bool)])
                running = np.cumsum(targets)
                for k, is_target in enumerate(targets):
                    for key, value in (("prompt_id", prompt), ("position", 5 + 2 * k), ("item_index", k),
                                       ("is_target", bool(is_target)), ("running_count", int(running[k])),
                                       ("n", n), ("m", m)):
                        columns[key].append(value)
                for key, value in (("prompt_id", prompt), ("position", 5 + 2 * (n + m) + 3), ("item_index", -1),
                                   ("is_target", False), ("running_count", n), ("n", n), ("m", m)):
                    columns[key].append(value)
                prompt += 1
    cols = {k: np.array(v) for k, v in columns.items()}
    rows = len(cols["n"])
    acts = np.stack([np.outer(cols["is_target"].astype(float), basis[0]),
                     np.outer(cols["running_count"], basis[1]),
                     np.outer(cols["n"], basis[2])], axis=1) + noise * rng.normal(size=(rows, 3, d))
    writer = ActivationWriter(path, {"locations": ITEM_LOCATIONS, "d": d, "model": "synthetic", "L": 20,
                                     "settings": {"synthetic": "items", "seed": seed}, "positions": "items"})
    cut = np.searchsorted(cols["prompt_id"], np.linspace(0, prompt, shards + 1)[1:-1])  # shards hold whole prompts
    for index, part in enumerate(np.split(np.arange(rows), cut)):
        k = len(part)
        writer.write_shard(index, {
            "acts": acts[part], "n": cols["n"][part].tolist(), "m": cols["m"][part].tolist(), "pair": ["a/b"] * k,
            "config": ["count"] * k, "seed": [0] * k, "prompt": ["p"] * k,
            "boundary_index": [int(v) for v in 5 + 2 * (cols["n"][part] + cols["m"][part]) + 3],
            "n_tokens": [int(v) for v in 5 + 2 * (cols["n"][part] + cols["m"][part]) + 4],
            **{key: cols[key][part].tolist() for key in ("prompt_id", "position", "item_index", "is_target",
                                                         "running_count")}})
    writer.finish({"n_rows": rows})
    return {**cols, "acts": acts}


def assert_round_trip(result):
    """``type(result).from_dict`` of its JSON document (through ``json``) equals ``result`` field for field,
    and the document it writes again is the same. Returns the result read back."""
    again = type(result).from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(result.to_dict(), sort_keys=True)
    return again
