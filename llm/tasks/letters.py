"""``letters``: count a letter in a random letter string ("how many r's in strawberry", character counting).

The string holds ``n`` copies of the letter and ``m ~ U{0..L-n}`` other letters in the order of
:func:`~countlens.llm.tasks.lists.arrangement` (the same ``(seed, n, k, L)`` gives the same target places as
``lists``), the other letters drawn from the rest of the alphabet. Items are characters, so several share one
token (rule ``shared``): an item sits at the token holding its character, items of one token share that
position, and the running count is defined per token (the targets among the items up to and including that
token; docs/definitions.md §2).
"""

from __future__ import annotations

import string

import numpy as np

from countlens.core.errors import ConfigError, literal
from countlens.llm.tasks.lists import arrangement
from countlens.llm.tasks.registry import Instruction, Task, TaskOption, declare_task

WORDINGS = {
    "count": 'Count how many times the letter "{target}" appears in the following string. Answer with a number.'
             "\nString:{items}",
    "how-many": 'How many "{target}" letters are in this string?\nString:{items}\nReply with just the number.',
    "tally": 'Here is a string:{items}\nWhat is the number of "{target}" letters in it? Give only the count.',
}


def _letter(value, name: str) -> str:
    text = str(value)
    if len(text) != 1 or text not in string.ascii_lowercase:
        raise ConfigError(name, f"{{{name}}} must be one lower-case letter a-z, got {literal(repr(text))}")
    return text


def letter_parts(config: str, letter: str, items: np.ndarray, rng: np.random.Generator) -> tuple[str, np.ndarray]:
    """The instruction with the letter string (``items``: 1 = the letter), a space before it, and each
    character's span (n_items, 2)."""
    before, after = (part.format(target=letter) for part in WORDINGS[config].split("{items}"))
    others = np.array([c for c in string.ascii_lowercase if c != letter])
    chars = np.where(np.asarray(items) == 1, letter, rng.choice(others, size=len(items)))
    start = len(before) + 1
    spans = np.stack([start + np.arange(len(items)), start + 1 + np.arange(len(items))], axis=1).astype(np.int64)
    return before + " " + "".join(chars.tolist()) + after, spans


@declare_task
class Letters(Task):
    """A letter counted among random other letters of one string."""

    name = "letters"
    order = 2
    summary = "count a letter in a random letter string (letter=r); items are characters, several per token"
    example = "letters:letter=r"
    options = (TaskOption("letter", "r", "the counted letter", _letter),)
    wordings = WORDINGS
    rule = "shared"
    twins = True

    def label(self) -> str:
        return self.values["letter"]

    def instruction(self, config, group, n, k, seed, L):
        items = arrangement(seed, n, k, L)
        rng = np.random.default_rng([seed, n, k, L, 1])
        text, spans = letter_parts(config, self.values["letter"], items, rng)
        return Instruction(text, spans, items == 1)

    def replacements(self, clean, j, group, seed):
        """The other letters, in a seeded order."""
        others = [c for c in string.ascii_lowercase if c != self.values["letter"]]
        order = np.random.default_rng([seed, len(clean.targets), j, 3]).permutation(len(others))
        return [others[i] for i in order]


__all__ = ["WORDINGS", "letter_parts", "Letters"]
