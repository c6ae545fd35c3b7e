"""Counting prompts (SPEC §2): a chat turn asking to count a target item among distractors.

A prompt is fixed by ``(n, m, pair, config, seed, k)``: ``n`` targets and ``m`` distractors (a *token pair*),
shuffled, each item written as a space followed by the item (so every item is one token for common BPE
vocabularies — checked for the model at hand), inside an instruction wording (a *configuration*). The number
of distractors and the item order depend only on ``(seed, n, k)``, so the pairs and configurations of one seed
are paired comparisons. ``m`` is drawn uniformly from ``0..L-n`` (the toy's domain ``n + m <= L``).

The **assistant boundary** is the last token of the prompt after ``apply_chat_template(...,
add_generation_prompt=True)`` (for SmolLM2 the ``\\n`` after ``<|im_start|>assistant``). A model without a chat
template needs ``template="plain"`` (``"{instruction}\\nAnswer:"``, boundary ``:``), never a silent guess.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from countlens.errors import UsageError

# (target, distractor): common English words, one token each (with a leading space) in GPT-2, Llama-3,
# Qwen2 and SmolLM2 vocabularies.
DEFAULT_PAIRS = (("a", "b"), ("x", "o"), ("cat", "dog"), ("red", "blue"))

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
    """Everything that fixes a prompt set. Its ``to_dict`` is the resume key of a capture."""

    L: int = 256
    counts: list[int] = field(default_factory=lambda: list(range(0, 101)))
    per_count: int = 1
    pairs: list[list[str]] = field(default_factory=lambda: [list(p) for p in DEFAULT_PAIRS])
    configs: list[str] = field(default_factory=lambda: list(CONFIGURATIONS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    template: str = "chat"

    def validate(self) -> PromptSettings:
        """Raise :class:`UsageError` for settings that cannot make a prompt set."""
        if self.L < 1:
            raise UsageError(f"--L must be >= 1, got {self.L}")
        if not self.counts or min(self.counts) < 0 or max(self.counts) > self.L:
            raise UsageError(f"--counts must lie in 0..L={self.L}, got {min(self.counts)}..{max(self.counts)}")
        if len(set(self.counts)) != len(self.counts):
            raise UsageError("--counts holds a repeated count; list each count once")
        if self.per_count < 1:
            raise UsageError(f"--per-count must be >= 1, got {self.per_count}")
        if not self.pairs:
            raise UsageError("--pairs must name at least one target/distractor pair")
        for pair in self.pairs:
            if len(pair) != 2 or not all(pair) or pair[0] == pair[1]:
                raise UsageError(f"a pair is two different items like cat/dog, got {'/'.join(pair)!r}")
        unknown = [c for c in self.configs if c not in CONFIGURATIONS]
        if unknown or not self.configs:
            raise UsageError(f"--configs must be among {', '.join(CONFIGURATIONS)}, got {', '.join(unknown) or 'none'}")
        if not self.seeds:
            raise UsageError("--seeds must not be empty")
        if self.template not in TEMPLATES:
            raise UsageError(f"--template must be chat or plain, got {self.template!r}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    def n_prompts(self) -> int:
        return len(self.counts) * self.per_count * len(self.pairs) * len(self.configs) * len(self.seeds)


@dataclass
class Prompt:
    """One rendered prompt and its metadata; ``ids`` are the tokens fed to the model (boundary last)."""

    n: int
    m: int
    pair: str
    config: str
    seed: int
    prompt: str
    ids: list[int]

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
            raise UsageError(f"--pairs takes target/distractor items like a/b,cat/dog, got {part!r}")
        pairs.append([items[0].strip(), items[1].strip()])
    if not pairs:
        raise UsageError("--pairs must name at least one target/distractor pair")
    return pairs


def arrangement(seed: int, n: int, k: int, L: int) -> np.ndarray:
    """A shuffled 0/1 item sequence (1 = target) with ``n`` ones and ``m ~ U{0..L-n}`` zeros."""
    rng = np.random.default_rng([seed, n, k, L])
    m = int(rng.integers(0, L - n + 1))
    items = np.zeros(n + m, dtype=np.int8)
    items[:n] = 1
    rng.shuffle(items)
    return items


def instruction_text(config: str, pair, items: np.ndarray) -> str:
    target, distractor = pair
    words = "".join(f" {target}" if it else f" {distractor}" for it in items)
    return CONFIGURATIONS[config].format(target=target, items=words)


def render(tokenizer, instruction: str, template: str) -> tuple[str, bool]:
    """The text fed to the tokenizer, and whether the tokenizer should add its special tokens."""
    if template == "plain":
        return PLAIN_TEMPLATE.format(instruction=instruction), True
    if not getattr(tokenizer, "chat_template", None):
        raise UsageError("the model has no chat template; pass --template plain to use "
                         f"{PLAIN_TEMPLATE.format(instruction='<instruction>')!r} (recorded in the capture)")
    text = tokenizer.apply_chat_template([{"role": "user", "content": instruction}], tokenize=False,
                                         add_generation_prompt=True)
    # The chat template already holds the special tokens (apply_chat_template(tokenize=True) does the same).
    return text, False


def _encode(tokenizer, texts: list[str], add_special: bool) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=add_special)["input_ids"]


def check_single_tokens(tokenizer, settings: PromptSettings) -> None:
    """Every item, as it appears in a sequence (``" item"``), must be one token; :class:`UsageError` otherwise."""
    for pair in settings.pairs:
        for item in pair:
            ids = tokenizer(f" {item}" * 3, add_special_tokens=False)["input_ids"]
            if len(ids) != 3 or len(set(ids)) != 1:
                raise UsageError(f"item {item!r} of pair {pair_name(pair)} is not one token for this model "
                                 f"(' {item}' x3 -> {len(ids)} tokens); choose other --pairs")


def build_prompts(tokenizer, settings: PromptSettings) -> list[Prompt]:
    """All prompts of ``settings``, tokenized, in grid order (seed, config, pair, count, k).

    Checks that each prompt holds exactly ``n`` target and ``m`` distractor tokens beyond the instruction's
    own, so an item that merges with its neighbours is caught (:class:`UsageError`).
    """
    settings.validate()
    check_single_tokens(tokenizer, settings)
    prompts: list[Prompt] = []
    base: dict[tuple[str, str], list[int]] = {}
    for seed in settings.seeds:
        for config in settings.configs:
            for pair in settings.pairs:
                name = pair_name(pair)
                item_ids = [tokenizer(f" {item}", add_special_tokens=False)["input_ids"][0] for item in pair]
                if (config, name) not in base:
                    text, special = render(tokenizer, instruction_text(config, pair, np.zeros(0)), settings.template)
                    base[(config, name)] = _encode(tokenizer, [text], special)[0]
                texts, meta = [], []
                for n in settings.counts:
                    for k in range(settings.per_count):
                        items = arrangement(seed, n, k, settings.L)
                        text, special = render(tokenizer, instruction_text(config, pair, items), settings.template)
                        texts.append(text)
                        meta.append((n, len(items) - n))
                for (n, m), text, ids in zip(meta, texts, _encode(tokenizer, texts, special), strict=True):
                    _check_items(ids, base[(config, name)], item_ids, pair, n, m)
                    prompts.append(Prompt(n=n, m=m, pair=name, config=config, seed=seed, prompt=text, ids=ids))
    boundary = {p.ids[-1] for p in prompts}
    if len(boundary) != 1:
        raise UsageError("prompts end in different boundary tokens; the chat template does not end the same way "
                         "for every prompt — pass --template plain")
    return prompts


def _check_items(ids: list[int], base_ids: list[int], item_ids: list[int], pair, n: int, m: int) -> None:
    t_id, d_id = item_ids
    ok = (len(ids) - len(base_ids) == n + m and ids.count(t_id) - base_ids.count(t_id) == n
          and ids.count(d_id) - base_ids.count(d_id) == m)
    if not ok:
        raise UsageError(f"pair {pair_name(pair)} does not tokenize as one token per item inside the prompt "
                         f"(n={n}, m={m}); choose other --pairs")


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
