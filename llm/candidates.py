"""Candidate answers as token lists, compared with each other (docs/definitions.md §2.9, §2.19): where they first
differ (:func:`divergence`), and which counts a read-out scores (:func:`counts_with_previous`,
:func:`answer_candidates`). Pure functions of token ids and counts, re-exported by
:mod:`countlens.llm.answers`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Divergence:
    """Where candidate answers (token-id lists) first differ: ``prefix`` the tokens every candidate begins with
    (teacher-forced before the read), ``position`` its length — the answer position (0 = the boundary's next
    token) where a next-token read-out tells the candidates apart; ``ended`` whether a candidate *is* the
    prefix (it ends where the others go on: no single token there stands for it, only the mass of not
    continuing the number)."""

    prefix: tuple[int, ...]
    position: int
    ended: bool

    @property
    def readable(self) -> bool:
        """Whether one token per candidate at :attr:`position` tells them apart (no candidate ended there)."""
        return not self.ended


def divergence(candidates: Sequence[Sequence[int]]) -> Divergence:
    """The :class:`Divergence` of two or more candidate answers' token lists (the one definition of "the first
    answer position where the answers differ": the direct logit attribution, the lens and every pair-by-pair
    read-out use it). Identical candidates have no such position: ``ValueError``."""
    seqs = [tuple(int(t) for t in c) for c in candidates]
    if len(seqs) < 2:
        raise ValueError("a divergence needs at least two candidates")
    if len(set(seqs)) == 1:
        raise ValueError(f"every candidate is the same tokens {list(seqs[0])}: no answer position tells them apart")
    j = 0
    while all(len(s) > j for s in seqs) and len({s[j] for s in seqs}) == 1:
        j += 1
    return Divergence(seqs[0][:j], j, any(len(s) == j for s in seqs))


def counts_with_previous(counts: Sequence[int]) -> list[int]:
    """The counts a logit difference of ``n`` against ``n − 1`` scores for the counts ``counts``: each ``n`` and
    its ``n − 1`` (where ``n >= 1``), sorted, each once."""
    return sorted({int(n) - d for n in counts for d in (0, 1) if int(n) - d >= 0})


def answer_candidates(counts: Sequence[int]) -> list[int]:
    """The candidate answers of a prompt set whose counts are ``counts``: every integer of
    ``min(counts)..max(counts)`` (a capture's ``meta["answer_candidates"]``)."""
    return list(range(int(min(counts)), int(max(counts)) + 1))


__all__ = ["Divergence", "divergence", "counts_with_previous", "answer_candidates"]
