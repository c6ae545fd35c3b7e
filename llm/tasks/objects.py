"""``objects``: count the objects of one category in a natural list of objects of several categories ("I have an
apple, a chair, a banana and a violin. How many fruits do I have?"; BIG-Bench Hard's ``object_counting``).

A prompt is fixed by ``(n, seed, k, L)`` and the category: the order of targets and other objects and their
number ``m ~ U{0..L-n}`` are :func:`~countlens.llm.tasks.lists.arrangement`'s (the same target places as
``lists``), each target an object of the category and each other object one of the other categories, drawn
with replacement from a seeded generator. Objects are written with their article (``a``/``an``), separated by
commas and a final ``and``. An item is the object's noun (without its article) and may span several tokens:
it sits at its last token (rule ``whole``; a noun merged with a neighbour is refused). The corrupted twin
replaces one target and its article by an object of another category and its article (those with the same
article first), the first of a seeded order whose tokens differ from the prompt's only over that article and
noun and whose length is the prompt's (:func:`countlens.llm.positions.experiment.corrupted_twin` checks it under
the model's tokenizer); where none does, the analysis refuses that prompt in one line.
"""

from __future__ import annotations

import numpy as np

from countlens.core.fields import OneOf
from countlens.llm.tasks.lists import arrangement
from countlens.llm.tasks.registry import Instruction, Task, TaskOption, declare_task

# category -> (its plural in the question, its objects: common nouns, lower case)
CATEGORIES = {
    "fruit": ("fruits", ("apple", "banana", "cherry", "grape", "lemon", "mango", "orange", "peach", "pear", "plum",
                         "strawberry", "pineapple")),
    "furniture": ("pieces of furniture", ("chair", "table", "sofa", "bed", "desk", "shelf", "stool", "wardrobe",
                                          "bench", "cabinet", "armchair", "bookcase")),
    "animal": ("animals", ("dog", "cat", "horse", "rabbit", "goat", "tiger", "lion", "sheep", "mouse", "elephant",
                           "owl", "donkey")),
    "vehicle": ("vehicles", ("car", "bus", "truck", "bicycle", "train", "boat", "tractor", "motorcycle", "van",
                             "scooter", "airplane", "ambulance")),
    "instrument": ("musical instruments", ("violin", "piano", "guitar", "drum", "flute", "trumpet", "harp", "cello",
                                           "clarinet", "banjo", "accordion", "oboe")),
}

WORDINGS = {
    "count": "Count how many {target} are in the following list. Answer with a number.\nList:{items}",
    "how-many": "I have{items}.\nHow many {target} do I have? Reply with just the number.",
    "tally": "Here is a list of objects:{items}\nWhat is the number of {target} in it? Give only the count.",
}
NOTHING = " nothing"  # the items of an empty list


def article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def object_parts(config: str, category: str, nouns: list[str]) -> tuple[str, np.ndarray]:
    """The instruction listing ``nouns`` (" an apple, a chair and a violin"), and each noun's character span
    (n_items, 2) ``[start, end)``, its article and separators outside it."""
    before, after = (part.format(target=CATEGORIES[category][0]) for part in WORDINGS[config].split("{items}"))
    pieces, spans, at = [], [], len(before)
    for i, noun in enumerate(nouns):
        joint = "" if i == 0 else (" and" if i == len(nouns) - 1 else ",")
        lead = f"{joint} {article(noun)} "
        pieces.append(lead + noun)
        spans.append((at + len(lead), at + len(lead) + len(noun)))
        at += len(lead) + len(noun)
    items = "".join(pieces) if nouns else NOTHING
    return before + items + after, np.array(spans, dtype=np.int64).reshape(-1, 2)


def draw_objects(category: str, items: np.ndarray, rng: np.random.Generator) -> list[str]:
    """A noun for each item of ``items`` (1 = a target: an object of ``category``; 0: one of another)."""
    own = np.array(CATEGORIES[category][1])
    others = np.array([noun for name, (_, nouns) in CATEGORIES.items() if name != category for noun in nouns])
    mine, theirs = rng.choice(own, size=len(items)), rng.choice(others, size=len(items))
    return np.where(np.asarray(items) == 1, mine, theirs).tolist()


def _category(value, name: str) -> str:
    return OneOf(tuple(CATEGORIES))(str(value), name)


@declare_task
class Objects(Task):
    """Objects of one category counted among objects of the others, in a natural list."""

    name = "objects"
    order = 3
    summary = ("count the objects of one category (category=fruit|furniture|animal|vehicle|instrument) in a "
               "natural list ('an apple, a chair and a banana'); items may be several tokens")
    example = "objects:category=fruit"
    options = (TaskOption("category", "fruit", "the counted category", _category),)
    wordings = WORDINGS
    rule = "whole"
    twins = True

    def label(self) -> str:
        return self.values["category"]

    def instruction(self, config, group, n, k, seed, L):
        items = arrangement(seed, n, k, L)
        nouns = draw_objects(self.values["category"], items, np.random.default_rng([seed, n, k, L, 2]))
        text, spans = object_parts(config, self.values["category"], nouns)
        return Instruction(text, spans, items == 1)

    def twin_region(self, clean, j):
        """The noun and its article (``an apple``): a replacement may need the other article."""
        a, b = (int(v) for v in clean.spans[j])
        return clean.text.rindex(" ", 0, a - 1) + 1, b

    def replacements(self, clean, j, group, seed):
        """The other categories' objects with their article, those with the target's article first (the
        smallest change), each part in a seeded order."""
        a, b = (int(v) for v in clean.spans[j])
        noun = clean.text[a:b]
        others = [w for name, (_, nouns) in CATEGORIES.items() if name != self.values["category"] for w in nouns]
        rng = np.random.default_rng([seed, len(clean.targets), j, 3])
        same = [w for w in others if article(w) == article(noun)]
        other = [w for w in others if article(w) != article(noun)]
        return [f"{article(w)} {w}" for part in (same, other) for w in (part[i] for i in rng.permutation(len(part)))]


__all__ = ["CATEGORIES", "WORDINGS", "article", "object_parts", "draw_objects", "Objects"]
