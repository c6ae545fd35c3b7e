"""Where Figure 14's direct logit attribution reads (:mod:`countlens.llm.components.experiment`): each logit
difference at the answer position where its two answers first differ (definitions §2.19,
:func:`~countlens.llm.answers.divergence`) — at the boundary from the batch's own pass, later from a pass of the
prompt with the answers' shared prefix appended (teacher-forced) — and the CSV records of those reads. ``plan``
is the run's :class:`~countlens.llm.components.experiment.ComponentsPlan` (not imported: the experiment imports
this module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from countlens.llm.answers import divergence
from countlens.llm.components.attribution import (
    BoundaryWrites,
    ComponentPass,
    FrozenNorm,
    attributed_differences,
    boundary_writes,
    first_token_rows,
    frozen_norm,
    token_parts,
)


@dataclass(frozen=True)
class AnswerRead:
    """One logit difference the attribution reads: prompt ``prompt_id``'s ``target`` at answer position
    ``position`` (0: the boundary's next token; ``j``: the next token after the answer's first ``j`` tokens,
    ``prefix``, teacher-forced), token ``a`` against token ``b`` (``None``: the model's own greedy token there,
    the argmax of the read's logits)."""

    prompt_id: int
    target: str
    position: int
    prefix: tuple[int, ...]
    a: int
    b: int | None


def answer_reads(plan, i: int, generated: list[int],
                 continuation: frozenset[int] = frozenset()) -> list[AnswerRead]:
    """The reads of prompt ``i`` whose greedy answer is ``generated`` (token ids, the stop token excluded), each
    where its two answers first differ (:func:`~countlens.llm.answers.divergence`): ``answer``, the correct
    count's tokens against the model's own greedy answer, at the first position of the correct answer where the
    greedy one departs from it (a greedy answer that begins with the whole correct answer and ends the number
    there departs nowhere: read at the boundary, the same token twice, zero; one that goes on with a token of
    ``continuation``, the tokens that continue a number — "12" for the correct "1" — has no one token there that
    stands for the correct answer: no ``answer`` read); ``previous``, ``n``'s tokens against ``n − 1``'s (where the
    plan has them)."""
    correct = plan.correct[i]
    departs = [j for j in range(len(correct)) if j >= len(generated) or int(generated[j]) != correct[j]]
    goes_on = not departs and len(generated) > len(correct) and int(generated[len(correct)]) in continuation
    j = departs[0] if departs else 0
    reads = [] if goes_on else [AnswerRead(i, "answer", j, correct[:j], correct[j], None)]
    other = plan.previous[i]
    if other is not None:
        k = divergence([correct, other]).position
        reads.append(AnswerRead(i, "previous", k, correct[:k], correct[k], other[k]))
    return reads


def read_rows(plan, reads: list[AnswerRead], at: np.ndarray, writes: BoundaryWrites,
               logits: np.ndarray, head, frozen) -> tuple[list[dict[str, Any]], list[tuple[int, int, float]]]:
    """The CSV records of ``reads``, read ``i`` from row ``at[i]`` of a pass's ``writes`` (its real logits
    ``logits`` (N, V), its frozen final norm ``frozen``), and per read ``(a, b, total)``: the tokens compared
    and the model's real logit difference of the two (nats)."""
    L, H = plan.n_blocks, plan.n_heads
    at = np.asarray(at, dtype=np.int64)
    N = len(at)
    b_ids = [r.b if r.b is not None else int(np.argmax(logits[k])) for r, k in zip(reads, at, strict=True)]
    tokens = np.array([[r.a, b] for r, b in zip(reads, b_ids, strict=True)], dtype=np.int64)  # (N, 2)
    read = first_token_rows(head, tokens)
    norm = FrozenNorm(frozen.gain, frozen.shift, frozen.centred, frozen.scale[at])
    parts, constant = token_parts(writes.writes[at], norm, read)  # (N, 1 + 2L, 2), (N, 2)
    head_parts, _ = token_parts(writes.heads[at].reshape(N, L * H, -1), norm, read)  # (N, L * H, 2)
    has_constant = bool(np.any(frozen.shift != 0) or np.any(read.bias != 0))
    real = logits[at[:, None], tokens]  # (N, 2) the model's own logits of the two tokens
    shares, const = attributed_differences(parts, constant, read.softcap, 0, 1)
    head_shares, _ = attributed_differences(head_parts, constant, read.softcap, 0, 1, total_parts=parts)
    rows, compared = [], []
    for j, r in enumerate(reads):
        p = plan.prompts[r.prompt_id]
        total = float(real[j, 0] - real[j, 1])
        compared.append((int(tokens[j, 0]), int(tokens[j, 1]), total))

        def row(layer, kind, h, value, r=r, p=p, total=total):
            return {"prompt_id": r.prompt_id, "n": p.n, "target": r.target, "layer": layer, "kind": kind, "head": h,
                    "contribution": float(value), "total": total}
        rows.append(row(None, "embed", None, shares[j, 0]))
        for b_ in range(L):
            rows.append(row(b_, "attn", None, shares[j, 1 + 2 * b_]))
            rows.append(row(b_, "mlp", None, shares[j, 2 + 2 * b_]))
            rows.extend(row(b_, "head", h, head_shares[j, b_ * H + h]) for h in range(H))
        if has_constant:
            rows.append(row(None, "bias", None, const[j]))
    return rows, compared


def prefixed_pass(model, plan, sequences: list[list[int]], pad_id: int, head):
    """Every write at the last position of each token list of ``sequences`` (a prompt and an answer prefix), one
    left-padded pass under :class:`~countlens.llm.components.attribution.ComponentPass`: ``(writes, logits (N, V)
    float64, frozen final norm)``."""
    import torch

    device = model.get_input_embeddings().weight.device
    T = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), T), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(sequences), T), dtype=torch.long, device=device)
    for row, s in enumerate(sequences):
        ids[row, T - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[row, T - len(s):] = 1
    rec = ComponentPass(model, *plan.sites)
    with rec:
        model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=False)
    return (boundary_writes(model, rec, plan.n_heads), head.logits(rec.last).double().cpu().numpy(),
            frozen_norm(head.norm, rec.last))


def answer_rows(plan, model, reads: list[tuple[int, AnswerRead]], writes: BoundaryWrites,
                 logits: np.ndarray, head, frozen, pad_id: int, B: int):
    """The CSV records of one batch's ``reads`` (``(row of the batch's boundary pass, read)``) and per
    ``(prompt_id, target)`` its ``(a, b, total)``: the reads at the boundary from the batch's pass (``writes``,
    ``logits``, ``frozen``), the others from passes of their prompts with the answer's shared prefix appended
    (:func:`prefixed_pass`, ``B`` sequences at a time; a prompt's ``answer`` and ``previous`` share one where
    their prefixes agree)."""
    here = [(j, r) for j, r in reads if r.position == 0]
    rows, compared = [], {}
    if here:
        got, pairs = read_rows(plan, [r for _, r in here], np.array([j for j, _ in here]), writes, logits, head,
                                frozen)
        rows.extend(got)
        compared.update({(r.prompt_id, r.target): c for (_, r), c in zip(here, pairs, strict=True)})
    later = [r for _, r in reads if r.position > 0]
    keys = list(dict.fromkeys((r.prompt_id, r.prefix) for r in later))
    for start in range(0, len(keys), B):
        chunk = keys[start:start + B]
        where = {key: k for k, key in enumerate(chunk)}
        mine = [r for r in later if (r.prompt_id, r.prefix) in where]
        sequences = [list(plan.prompts[i].ids) + list(prefix) for i, prefix in chunk]
        w, lg, fz = prefixed_pass(model, plan, sequences, pad_id, head)
        got, pairs = read_rows(plan, mine, np.array([where[(r.prompt_id, r.prefix)] for r in mine]), w, lg, head,
                                fz)
        rows.extend(got)
        compared.update({(r.prompt_id, r.target): c for r, c in zip(mine, pairs, strict=True)})
    # target by target, then prompt by prompt (as the batch's reads come); stable: a read's rows keep their order
    order = {(r.prompt_id, r.target): (r.target != "answer", k) for k, (_, r) in enumerate(reads)}
    rows.sort(key=lambda row: order[(row["prompt_id"], row["target"])])
    return rows, compared


__all__ = ["AnswerRead", "answer_reads", "read_rows", "prefixed_pass", "answer_rows"]
