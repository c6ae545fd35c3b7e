"""``lists``: count a one-token target among one-token distractors in a space-separated list (the paper's
prompts; docs/definitions.md §2).

A prompt is fixed by ``(n, m, pair, config, seed, k)``: ``n`` targets and ``m`` distractors (a *token pair*),
shuffled, each item written as a space followed by the item, inside an instruction wording (a
*configuration*). The number of distractors and the item order depend only on ``(seed, n, k)``, so the pairs
and configurations of one seed are paired comparisons. ``m`` is drawn uniformly from ``0..L-n`` (the toy's
domain ``n + m <= L``). Each item must be one token of its own (rule ``own``). The corrupted twin turns one
target into the distractor.
"""

from __future__ import annotations

import numpy as np

from countlens.llm.tasks.registry import Instruction, Task, declare_task

# (target, distractor): common English words, one token each (with a leading space) in GPT-2, Llama-3,
# Qwen2 and SmolLM2 vocabularies.
DEFAULT_PAIRS = (("a", "b"), ("x", "o"), ("cat", "dog"), ("red", "blue"))
# More pairs to try where a default one is not single-token (``countlens llm pairs``).
CANDIDATE_PAIRS = DEFAULT_PAIRS + (("A", "B"), ("yes", "no"), ("up", "down"), ("on", "off"), ("hot", "cold"),
                                   ("sun", "moon"), ("dot", "dash"), ("big", "small"), ("left", "right"),
                                   ("apple", "pear"), ("x", "y"), ("1", "0"))

# Instruction wordings. ``{target}`` is the counted item, ``{items}`` the space-prefixed item sequence.
CONFIGURATIONS = {
    "count": 'Count how many times "{target}" appears in the following sequence. Answer with a number.\n'
             "Sequence:{items}",
    "how-many": 'How many times does "{target}" occur in this list?\nList:{items}\nReply with just the number.',
    "tally": "Here is a sequence of items:{items}\n"
             'What is the number of "{target}" items in it? Give only the count.',
}


def pair_name(pair) -> str:
    return f"{pair[0]}/{pair[1]}"


def arrangement(seed: int, n: int, k: int, L: int) -> np.ndarray:
    """A shuffled 0/1 item sequence (1 = target) with ``n`` ones and ``m ~ U{0..L-n}`` zeros."""
    rng = np.random.default_rng([seed, n, k, L])
    m = int(rng.integers(0, L - n + 1))
    items = np.zeros(n + m, dtype=np.int8)
    items[:n] = 1
    rng.shuffle(items)
    return items


def instruction_parts(config: str, pair, items: np.ndarray) -> tuple[str, np.ndarray]:
    """The instruction text and each item's character span in it, (n_items, 2) ``[start, end)`` from the
    item's leading space."""
    target, distractor = pair
    before, after = (part.format(target=target) for part in CONFIGURATIONS[config].split("{items}"))
    words = (f" {distractor}", f" {target}")
    lengths = np.where(np.asarray(items) == 1, len(words[1]), len(words[0]))
    ends = len(before) + np.cumsum(lengths)
    spans = np.stack([ends - lengths, ends], axis=1) if len(lengths) else np.zeros((0, 2), dtype=np.int64)
    return before + "".join(words[it] for it in items.tolist()) + after, spans


@declare_task
class Lists(Task):
    """Today's prompts: targets among distractors, both drawn from the settings' token pairs."""

    name = "lists"
    order = 0
    summary = "count a one-token target among one-token distractors in a space-separated list (the paper's task)"
    example = "lists"
    wordings = CONFIGURATIONS
    rule = "own"
    uses_pairs = True
    twins = True

    def labels(self, settings):
        return [(pair_name(pair), pair) for pair in settings.pairs]

    def group_of(self, label, settings):
        return label.split("/")

    def replacements(self, clean, j, group, seed):
        return [f" {group[1]}"]  # the target (with its leading space) turned into the distractor

    def instruction(self, config, group, n, k, seed, L):
        items = arrangement(seed, n, k, L)
        text, spans = instruction_parts(config, group, items)
        return Instruction(text, spans, items == 1)


__all__ = ["DEFAULT_PAIRS", "CANDIDATE_PAIRS", "CONFIGURATIONS", "pair_name", "arrangement", "instruction_parts",
           "Lists"]
