"""``repeat``: one word repeated ``n`` times, the separator chosen; the question asks how many words.

The separator decides whether a late MLP overwrites the count (space- vs comma-separated repeated words);
``a, a, a, ...`` is the stable-counting-capacity assay. Every item is a target (no distractors), so a prompt of
count ``n`` is fixed by ``n`` alone: the grid takes the first seed and one prompt per count (``seeded`` False). An item is the word
without its separator and sits at its last token (rule ``whole``). No corrupted twin is defined: the question
counts every word, so turning one word into another leaves the answer unchanged (a twin would need a question
about one word, "how many times does a appear", which is another task: ``lists`` with the same word as
target), and position patching and the heads' ablation refuse this task, saying so.
"""

from __future__ import annotations

import numpy as np

from countlens.core.errors import ConfigError, literal
from countlens.core.fields import OneOf
from countlens.llm.tasks.registry import Instruction, Task, TaskOption, declare_task

# separator name -> (text before the first item, text between two items)
SEPARATORS = {"space": (" ", " "), "comma": (" ", ", "), "newline": ("\n", "\n"), "pipe": (" ", " | ")}

WORDINGS = {
    "count": "Count how many words appear in the following sequence. Answer with a number.\nSequence:{items}",
    "how-many": "How many words are in this list?\nList:{items}\nReply with just the number.",
    "tally": "Here is a sequence of words:{items}\nWhat is the number of words in it? Give only the count.",
}


def _word(value, name: str) -> str:
    """A word of letters or digits, without spaces or separators."""
    text = str(value)
    if not text or not text.isalnum():
        raise ConfigError(name, f"{{{name}}} must be a word of letters or digits, got {literal(repr(text))}")
    return text


def repeat_parts(config: str, word: str, separator: str, n: int) -> tuple[str, np.ndarray]:
    """The instruction with ``word`` written ``n`` times, and each word's character span (n, 2)."""
    before, after = WORDINGS[config].split("{items}")
    lead, between = SEPARATORS[separator]
    starts = len(before) + len(lead) + np.arange(n, dtype=np.int64) * (len(word) + len(between))
    items = lead + between.join([word] * n) if n else ""
    return before + items + after, np.stack([starts, starts + len(word)], axis=1)


@declare_task
class Repeat(Task):
    """One word repeated n times; every item counted."""

    name = "repeat"
    order = 1
    summary = ("one word repeated n times (separator=space|comma|newline|pipe, word=a): the separator effect "
               "and the counting capacity")
    example = "repeat:separator=comma"
    options = (TaskOption("separator", "space", "what stands between two words", OneOf(tuple(SEPARATORS))),
               TaskOption("word", "a", "the repeated word", _word))
    wordings = WORDINGS
    seeded = False
    uses_L = False
    no_twin = "its question counts every word, so no one-word change lowers the count by one"

    def label(self) -> str:
        return self.values["word"]

    def instruction(self, config, group, n, k, seed, L):
        text, spans = repeat_parts(config, self.values["word"], self.values["separator"], n)
        return Instruction(text, spans, np.ones(n, dtype=bool))


__all__ = ["SEPARATORS", "WORDINGS", "repeat_parts", "Repeat"]
