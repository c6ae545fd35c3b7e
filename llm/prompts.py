"""Counting prompts (docs/definitions.md §2): a chat turn asking to count a target item among distractors.

A prompt is fixed by ``(n, m, pair, config, seed, k)``: ``n`` targets and ``m`` distractors (a *token pair*),
shuffled, each item written as a space followed by the item, inside an instruction wording (a
*configuration*). A prompt is rendered from its parts (instruction before the items, each item, instruction
after), so every item's characters are known; the fast tokenizer's offset mapping then gives each item's
token, and the check asks the real question in any vocabulary: is each item exactly one token of its own
(not merged with a neighbour such as ``:`` or ``\\n``), with ``n`` target and ``m`` distractor tokens. The number
of distractors and the item order depend only on ``(seed, n, k)``, so the pairs and configurations of one seed
are paired comparisons. ``m`` is drawn uniformly from ``0..L-n`` (the toy's domain ``n + m <= L``).

The **assistant boundary** is the last token of the prompt after ``apply_chat_template(...,
add_generation_prompt=True)`` (for SmolLM2 the ``\\n`` after ``<|im_start|>assistant``); the text after the
user's message must be the same for every prompt. A model without a chat template needs ``template="plain"``
(``"{instruction}\\nAnswer:"``, boundary ``:``), never a silent guess.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

import numpy as np

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.fields import AtLeast, Ints, OneOf, check_fields

# (target, distractor): common English words, one token each (with a leading space) in GPT-2, Llama-3,
# Qwen2 and SmolLM2 vocabularies.
DEFAULT_PAIRS = (("a", "b"), ("x", "o"), ("cat", "dog"), ("red", "blue"))
# More pairs to try where a default one is not single-token (``countlens llm pairs``).
CANDIDATE_PAIRS = DEFAULT_PAIRS + (("A", "B"), ("yes", "no"), ("up", "down"), ("on", "off"), ("hot", "cold"),
                                   ("sun", "moon"), ("dot", "dash"), ("big", "small"), ("left", "right"),
                                   ("apple", "pear"), ("x", "y"), ("1", "0"))
DEFAULT_L = 256
DEFAULT_COUNTS = tuple(range(0, 101))
DEFAULT_SEEDS = (0, 1, 2)

# Instruction wordings. ``{target}`` is the counted item, ``{items}`` the space-prefixed item sequence.
CONFIGURATIONS = {
    "count": 'Count how many times "{target}" appears in the following sequence. Answer with a number.\n'
             "Sequence:{items}",
    "how-many": 'How many times does "{target}" occur in this list?\nList:{items}\nReply with just the number.',
    "tally": "Here is a sequence of items:{items}\n"
             'What is the number of "{target}" items in it? Give only the count.',
}
TEMPLATES = ("chat", "plain")
PLAIN_TEMPLATE = "{instruction}\nAnswer:"


@dataclass
class PromptSettings:
    """Everything that fixes a prompt set; its ``to_dict`` is part of a capture's resume key. Errors name
    these fields (:class:`~countlens.core.errors.ConfigError`)."""

    L: int = DEFAULT_L
    counts: list[int] = field(default_factory=lambda: list(DEFAULT_COUNTS))
    per_count: int = 1
    pairs: list[list[str]] = field(default_factory=lambda: [list(p) for p in DEFAULT_PAIRS])
    configs: list[str] = field(default_factory=lambda: list(CONFIGURATIONS))
    seeds: list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    template: str = "chat"

    FIELDS: ClassVar[dict] = {"L": AtLeast(1), "counts": Ints(minimum=0, distinct=True), "per_count": AtLeast(1),
                              "seeds": Ints(), "template": OneOf(TEMPLATES)}

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> PromptSettings:
        """Raise :class:`ConfigError` naming the field of settings that cannot make a prompt set (reads no
        file); runs when the settings are built."""
        check_fields(self, self.FIELDS)
        if max(self.counts) > self.L:
            raise ConfigError("counts", f"{{counts}} must lie in 0..{self.L} (at most {{L}}), got "
                                        f"{min(self.counts)}..{max(self.counts)}", also=("L",))
        if not self.pairs:
            raise ConfigError("pairs", "{pairs} must name at least one target/distractor pair")
        for pair in self.pairs:
            if len(pair) != 2 or not all(pair) or pair[0] == pair[1]:
                raise ConfigError("pairs", "{pairs}: a pair is two different items like cat/dog, got "
                                           + literal(repr("/".join(pair))))
        unknown = [c for c in self.configs if c not in CONFIGURATIONS]
        if unknown or not self.configs:
            raise ConfigError("configs", f"{{configs}} must be among {', '.join(CONFIGURATIONS)}, got "
                                         + literal(", ".join(unknown) or "none"))
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    def n_prompts(self) -> int:
        return len(self.counts) * self.per_count * len(self.pairs) * len(self.configs) * len(self.seeds)


@dataclass
class Prompt:
    """One rendered prompt and its metadata; ``ids`` are the tokens fed to the model (boundary last).

    ``first_item_index`` / ``last_item_index``: token indices of the first and last item (-1 without items);
    the items are the tokens between them, in order.
    """

    n: int
    m: int
    pair: str
    config: str
    seed: int
    prompt: str
    ids: list[int]
    first_item_index: int = -1
    last_item_index: int = -1

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def boundary_index(self) -> int:
        return len(self.ids) - 1




def pair_name(pair) -> str:
    return f"{pair[0]}/{pair[1]}"


def parse_pairs(text: str) -> list[list[str]]:
    """``"a/b,cat/dog"`` -> ``[["a", "b"], ["cat", "dog"]]``."""
    pairs = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        items = part.split("/")
        if len(items) != 2 or not all(i.strip() for i in items):
            raise ConfigError("pairs", "{pairs} takes target/distractor items like a/b,cat/dog, got "
                                       + literal(repr(part)))
        pairs.append([items[0].strip(), items[1].strip()])
    if not pairs:
        raise ConfigError("pairs", "{pairs} must name at least one target/distractor pair")
    return pairs


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


def render(tokenizer, instruction: str, template: str) -> tuple[str, bool, int]:
    """The text fed to the tokenizer, whether the tokenizer should add its special tokens, and the character
    index where ``instruction`` starts in the text."""
    if template == "plain":
        return PLAIN_TEMPLATE.format(instruction=instruction), True, 0
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("template", "the model has no chat template; pass {template:plain} to use "
                                      + literal(repr(PLAIN_TEMPLATE.format(instruction="<instruction>")))
                                      + " (recorded in the capture)")
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": instruction}], tokenize=False,
                                             add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - a template may raise anything (jinja's raise_exception)
        raise ConfigError("template", "the model's chat template refuses a single user message ("
                                      + literal(_first_line(exc)) + "); pass {template:plain}") from None
    # The chat template already holds the special tokens (apply_chat_template(tokenize=True) does the same).
    start = text.find(instruction)
    if start < 0:
        raise ConfigError("template", "the model's chat template rewrites the user message, so its items "
                                      "cannot be located; pass {template:plain}")
    return text, False, start


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else exc.__class__.__name__


def _encode(tokenizer, texts: list[str], add_special: bool) -> tuple[list[list[int]], list]:
    """Token ids and character offsets of each text (needs a fast tokenizer's offset mapping)."""
    try:
        enc = tokenizer(texts, add_special_tokens=add_special, return_offsets_mapping=True)
    except NotImplementedError:
        raise UsageError("the model's tokenizer gives no character offsets (not a fast tokenizer), so items "
                         "cannot be located; convert it to a fast tokenizer (tokenizer.json)") from None
    return enc["input_ids"], enc["offset_mapping"]


def item_positions(offsets, spans: np.ndarray) -> np.ndarray:
    """The token index of each item, or -1 for an item that is not exactly one token of its own.

    ``offsets``: each token's ``(start, end)`` characters (special tokens ``(0, 0)``); ``spans``: (n_items, 2)
    each item's characters from its leading space. An item is one token of its own when exactly one token
    touches its span and that token lies inside it (a tokenizer that trims offsets may leave the space
    uncovered); a token reaching outside (``":" + " a"``, ``" a" + "\\n"``) or a second token (the space
    alone) fails.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    real = np.flatnonzero(offsets[:, 1] > offsets[:, 0])
    starts, ends = offsets[real, 0], offsets[real, 1]
    a, b = spans[:, 0], spans[:, 1]
    k = np.searchsorted(ends, a, side="right")  # the first token ending after the span starts
    has = k < len(real)
    kk = np.minimum(k, len(real) - 1)
    nxt = np.minimum(k + 1, len(real) - 1)
    alone = (k + 1 >= len(real)) | (starts[nxt] >= b)
    one = has & (starts[kk] >= a) & (starts[kk] < b) & (ends[kk] <= b) & alone
    return np.where(one, real[kk], -1)


def _tokens_over(tokenizer, ids, offsets, a: int, b: int) -> list[str]:
    return [tokenizer.decode([ids[i]]) for i, (s, e) in enumerate(offsets) if e > s and s < b and e > a]


def _check_items(tokenizer, text: str, ids, offsets, spans: np.ndarray, items) -> tuple[np.ndarray, str | None]:
    """Each item's token index, and why the items of this tokenized prompt are not one token each with one
    id per kind (``None`` when they are)."""
    if not len(spans):
        return np.zeros(0, dtype=np.int64), None
    positions = item_positions(offsets, spans)
    bad = np.flatnonzero(positions < 0)
    if len(bad):
        j = int(bad[0])
        a, b = (int(v) for v in spans[j])
        return positions, (f"item {j} {text[a:b]!r} is not one token of its own (tokens "
                           f"{_tokens_over(tokenizer, ids, offsets, a, b)})")
    token = np.asarray(ids)[positions]
    items = np.asarray(items)
    kinds = [set(np.unique(token[items == kind]).tolist()) for kind in (1, 0)]
    if any(len(k) > 1 for k in kinds) or (all(kinds) and kinds[0] == kinds[1]):
        return positions, "its items do not map to one token id per item"
    return positions, None


_PROBES = (np.array([1, 0, 0, 1, 1, 0], dtype=np.int8), np.array([0, 1, 1, 0, 0, 1], dtype=np.int8))


def pair_problem(tokenizer, pair, configs, template: str) -> str | None:
    """Why ``pair`` is not one token per item in these wordings, or ``None`` when it is.

    Checked on two short arrangements per configuration that put each item first, last and beside both.
    """
    for config in configs:
        for items in _PROBES:
            instruction, spans = instruction_parts(config, pair, items)
            text, special, start = render(tokenizer, instruction, template)
            ids, offsets = (x[0] for x in _encode(tokenizer, [text], special))
            _, problem = _check_items(tokenizer, text, ids, offsets, spans + start, items)
            if problem:
                return f"{problem} in the {config} wording"
    return None


def single_token_pairs(tokenizer, candidates, configs=tuple(CONFIGURATIONS), template: str = "chat") -> dict:
    """``{pair name: None if every item is one token of its own in these wordings, else why not}``."""
    return {pair_name(p): pair_problem(tokenizer, p, configs, template) for p in candidates}


def build_prompts(tokenizer, settings: PromptSettings) -> list[Prompt]:
    """All prompts of ``settings``, tokenized, in grid order (seed, config, pair, count, k).

    Every item must be one token of its own, giving ``n`` target and ``m`` distractor tokens; the text after
    the user's message (the generation prompt) and the boundary token must be the same for every prompt.
    Raises :class:`ConfigError` (``pairs`` or ``template``) otherwise, naming the default pairs that do
    work for a pair that does not.
    """
    for pair in settings.pairs:
        problem = pair_problem(tokenizer, pair, settings.configs, settings.template)
        if problem:
            working = [pair_name(p) for p in DEFAULT_PAIRS
                       if pair_problem(tokenizer, p, settings.configs, settings.template) is None]
            hint = (f"of the defaults, {', '.join(working)} work for this model" if working
                    else "none of the defaults works for this model")
            raise ConfigError("pairs", literal(f"pair {pair_name(pair)} is not one token per item for this "
                                               f"model: {problem}; {hint}") + "; choose other {pairs}")
    prompts: list[Prompt] = []
    ending: str | None = None
    for seed in settings.seeds:
        for config in settings.configs:
            for pair in settings.pairs:
                rendered = []
                for n in settings.counts:
                    for k in range(settings.per_count):
                        items = arrangement(seed, n, k, settings.L)
                        instruction, spans = instruction_parts(config, pair, items)
                        text, special, start = render(tokenizer, instruction, settings.template)
                        rendered.append((n, items, text, spans + start, text[start + len(instruction):]))
                encoded = _encode(tokenizer, [r[2] for r in rendered], special)
                for (n, items, text, spans, tail), ids, offsets in zip(rendered, *encoded, strict=True):
                    ending = tail if ending is None else ending
                    if tail != ending:
                        raise ConfigError("template", "the chat template ends prompts differently after the "
                                          f"user's message ({literal(repr(ending))} vs {literal(repr(tail))}); "
                                          "pass {template:plain}")
                    positions, problem = _check_items(tokenizer, text, ids, offsets, spans, items)
                    if problem:
                        raise ConfigError("pairs", literal(f"pair {pair_name(pair)} in the prompt n={n}, "
                                                           f"m={len(items) - n}, config {config}, seed {seed}: "
                                                           f"{problem}") + "; it merges with a neighbour here "
                                          "though not everywhere; choose other {pairs}")
                    prompts.append(Prompt(n=n, m=len(items) - n, pair=pair_name(pair), config=config, seed=seed,
                                          prompt=text, ids=ids,
                                          first_item_index=int(positions[0]) if len(positions) else -1,
                                          last_item_index=int(positions[-1]) if len(positions) else -1))
    if len({p.ids[-1] for p in prompts}) != 1:
        raise ConfigError("template", "prompts end in different boundary tokens; the chat template does not end "
                                      "the same way for every prompt; pass {template:plain}")
    return prompts


def boundary_tokens(tokenizer, prompt: Prompt, context: int = 4) -> dict:
    """The boundary token and the few before it, as ids and text, for the capture's metadata."""
    tail = prompt.ids[-context:]
    return {"id": prompt.ids[-1], "text": tokenizer.decode([prompt.ids[-1]]),
            "context_ids": tail, "context": [tokenizer.decode([i]) for i in tail]}


def mark_boundary(tokenizer, prompt: Prompt) -> str:
    """The prompt text with its boundary token shown as ``⟦...⟧`` (escaped, so a newline is visible)."""
    prefix = tokenizer.decode(prompt.ids[:-1])
    last = tokenizer.decode([prompt.ids[-1]])
    return f"{prefix}⟦{last.encode('unicode_escape').decode('ascii')}⟧"
