"""Items found in any tokenizer: each item's token from its character span and the fast tokenizer's offset
mapping (docs/definitions.md §2.8).

Every task hands over its prompt text and the character spans ``[start, end)`` of its items; this module is
the one place that turns them into token positions, under one of three rules a task declares:

- ``own``: each item is exactly one token of its own (``lists``: the target/distractor pairs);
- ``whole``: an item may span several tokens and sits at its last one; no token may hold characters of two
  items (an item merged with a neighbour is refused, naming which item and where);
- ``shared``: as ``whole``, but several items may share one token (``letters``: characters of a word), and
  then share its position.
"""

from __future__ import annotations

import numpy as np

from countlens.core.errors import UsageError

RULES = ("own", "whole", "shared")


def encode(tokenizer, texts: list[str], add_special: bool) -> tuple[list[list[int]], list]:
    """Token ids and character offsets of each text (needs a fast tokenizer's offset mapping);
    :class:`UsageError` where the tokenizer gives none."""
    try:
        enc = tokenizer(texts, add_special_tokens=add_special, return_offsets_mapping=True)
    except NotImplementedError:
        raise UsageError("the model's tokenizer gives no character offsets (not a fast tokenizer), so items "
                         "cannot be located; convert it to a fast tokenizer (tokenizer.json)") from None
    return enc["input_ids"], enc["offset_mapping"]


def span_tokens(offsets, spans) -> tuple[np.ndarray, np.ndarray]:
    """The first and last token index touching each span (``(-1, -1)`` for a span no token touches).

    ``offsets``: each token's ``(start, end)`` characters (special tokens ``(0, 0)``, skipped); ``spans``:
    (n_items, 2) ``[start, end)``. A token touches a span when they share a character.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    real = np.flatnonzero(offsets[:, 1] > offsets[:, 0])
    starts, ends = offsets[real, 0], offsets[real, 1]
    first = np.searchsorted(ends, spans[:, 0], side="right")  # the first token ending after the span starts
    last = np.searchsorted(starts, spans[:, 1], side="left") - 1  # the last token starting before it ends
    none = (first > last) | (first >= len(real)) | (last < 0)
    index = np.append(real, -1)
    return (np.where(none, -1, index[np.minimum(first, len(real))]),
            np.where(none, -1, index[np.clip(last, -1, len(real))]))


def item_positions(offsets, spans, rule: str = "own") -> np.ndarray:
    """Each item's token index under ``rule`` (see the module), or -1 for an item that breaks it.

    ``own``: exactly one token touches the item and lies inside its span (a tokenizer that trims offsets may
    leave a leading space uncovered); ``whole``/``shared``: the item's last token, -1 where no token touches it
    or (``whole``) where a token it shares with a neighbouring item merges them (both items get -1).
    """
    first, last = span_tokens(offsets, spans)
    if rule == "own":
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        inside = (offsets[last, 0] >= spans[:, 0]) & (offsets[last, 1] <= spans[:, 1])
        return np.where((first >= 0) & (first == last) & inside, last, -1)
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    positions = last.copy()
    if rule == "whole" and len(spans) > 1:
        order = np.argsort(np.asarray(spans)[:, 0], kind="stable")
        a, b = order[:-1], order[1:]
        merged = (last[a] >= 0) & (first[b] >= 0) & (last[a] >= first[b])
        positions[a[merged]] = -1
        positions[b[merged]] = -1
    return positions


def item_problem(tokenizer, text: str, ids, offsets, spans, rule: str) -> tuple[np.ndarray, str | None]:
    """Each item's token index (:func:`item_positions`), and why the items of this tokenized text break
    ``rule`` (``None`` when they do not): the first bad item, its characters and the tokens over them."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    if not len(spans):
        return np.zeros(0, dtype=np.int64), None
    positions = item_positions(offsets, spans, rule)
    bad = np.flatnonzero(positions < 0)
    if not len(bad):
        return positions, None
    j = int(bad[0])
    a, b = (int(v) for v in spans[j])
    tokens = [tokenizer.decode([ids[i]]) for i, (s, e) in enumerate(offsets) if e > s and s < b and e > a]
    if rule == "own":
        return positions, f"item {j} {text[a:b]!r} is not one token of its own (tokens {tokens})"
    if not tokens:
        return positions, f"item {j} {text[a:b]!r} (characters {a}..{b}) has no token of its own"
    return positions, (f"item {j} {text[a:b]!r} (characters {a}..{b}) is merged with a neighbouring item into "
                       f"one token (tokens {tokens})")


__all__ = ["RULES", "encode", "span_tokens", "item_positions", "item_problem"]
