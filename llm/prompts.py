"""Counting prompts (docs/definitions.md §2): a chat turn asking to count, in the task ``--task`` chooses.

A task (:mod:`countlens.llm.tasks`: ``lists``, the paper's target/distractor lists, by default) writes each
prompt's user message with the character spans of its items and which are targets; the message is rendered in
the chat template, and the fast tokenizer's offset mapping gives each item's token
(:func:`countlens.llm.tasks.item_positions`, under the task's rule: for ``lists`` each item exactly one token of
its own, not merged with a neighbour such as ``:`` or ``\\n``, with ``n`` target and ``m`` distractor tokens).

The **assistant boundary** is the last token of the prompt after ``apply_chat_template(...,
add_generation_prompt=True)`` (for SmolLM2 the ``\\n`` after ``<|im_start|>assistant``); the text after the
user's message must be the same for every prompt. A model without a chat template needs ``template="plain"``
(``"{instruction}\\nAnswer:"``, boundary ``:``), never a silent guess.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

import numpy as np

from countlens.core.errors import ConfigError, literal
from countlens.core.fields import AtLeast, Ints, OneOf, check_fields
from countlens.llm.tasks import (
    CANDIDATE_PAIRS,
    CONFIGURATIONS,
    DEFAULT_PAIRS,
    DEFAULT_TASK,
    TASKS,
    Task,
    arrangement,
    encode,
    instruction_parts,
    item_positions,
    item_problem,
    pair_name,
    parse_task,
)

DEFAULT_L = 256
DEFAULT_COUNTS = tuple(range(0, 101))
DEFAULT_SEEDS = (0, 1, 2)

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
    task: str = DEFAULT_TASK

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
        task = parse_task(self.task)
        self.task = task.text
        task.settle(self)
        unknown = [c for c in self.configs if c not in task.wordings]
        if unknown or not self.configs:
            raise ConfigError("configs", f"{{configs}} must be among {', '.join(task.wordings)} (the wordings of "
                                         f"{task.name}), got " + literal(", ".join(unknown) or "none"))
        return self

    def to_dict(self) -> dict:
        """The settings as a record (a capture's resume key); ``task`` only where it is not the default, so the
        keys of captures made before tasks existed still match, and ``task_digest`` where the task reads its
        prompts from a file (:meth:`~countlens.llm.tasks.Task.digest`)."""
        out = asdict(self)
        if out["task"] == DEFAULT_TASK:
            del out["task"]
        else:
            digest = self.counting_task().digest()
            if digest is not None:
                out["task_digest"] = digest  # a file task: its records' content, not only its path
        return out

    def counting_task(self) -> Task:
        """The task these settings name, its options checked (:func:`~countlens.llm.tasks.parse_task`)."""
        return parse_task(self.task)

    def require_twins(self, what: str) -> None:
        """``ConfigError`` naming ``task`` where the task has no corrupted twin of the same token length, which
        ``what`` (an analysis, e.g. "patching over positions") needs."""
        task = self.counting_task()
        self.require_items(what)
        if not task.twins:
            able = ", ".join(name for name, t in TASKS.items() if t.twins)
            why = f" ({task.no_twin})" if task.no_twin else ""
            raise ConfigError("task", f"{what} needs a corrupted twin of each prompt (the same tokens but one, the "
                                      f"count changed by one), which the task {literal(task.name)} does not define"
                                      f"{literal(why)}; use a {{task}} that does ({literal(able)})")

    def require_items(self, what: str) -> None:
        """``ConfigError`` naming ``task`` where the task's prompts do not say where their items are (a ``file``
        task without ``spans``), which ``what`` (an items capture, Figure 11, the heads) needs."""
        task = self.counting_task()
        if not task.located:
            raise ConfigError("task", f"{what} needs each item's position, but the task {literal(task.text)} gives "
                                      "no item spans (add spans to its records, docs/tasks/README.md)")

    def n_prompts(self) -> int:
        """The number of prompts these settings make (:meth:`~countlens.llm.tasks.Task.size`)."""
        return self.counting_task().size(self)


@dataclass
class Prompt:
    """One rendered prompt and its metadata; ``ids`` are the tokens fed to the model (boundary last).

    ``first_item_index`` / ``last_item_index``: token indices of the first and last item (-1 without items);
    ``item_indices``: each item's token index in order (items sharing a token share it; empty: the tokens
    ``first_item_index..last_item_index``), ``item_targets``: True for each counted item.
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
    item_indices: tuple[int, ...] = ()
    item_targets: tuple[bool, ...] = ()

    def item_tokens(self) -> tuple[list[int], list[int]]:
        """The distinct item tokens in order and the targets among the items of each (a running count is
        counted per token; docs/definitions.md §2)."""
        if not self.item_indices:
            span = list(range(self.first_item_index, self.last_item_index + 1)) if self.first_item_index >= 0 else []
            if len(span) != len(self.item_targets):
                raise ValueError("a prompt without item_indices needs item_targets for every item token")
            return span, [int(t) for t in self.item_targets]
        tokens, counts = np.unique(np.asarray(self.item_indices), return_inverse=True)
        per_token = np.bincount(counts, weights=np.asarray(self.item_targets, dtype=float), minlength=len(tokens))
        return tokens.tolist(), per_token.astype(int).tolist()

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def boundary_index(self) -> int:
        return len(self.ids) - 1


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


def render(tokenizer, instruction: str, template: str, context: tuple = ()) -> tuple[str, bool, int]:
    """The text fed to the tokenizer, whether the tokenizer should add its special tokens, and the character
    index where ``instruction`` starts in the text. ``context``: chat messages before the user's (a ``file``
    task's conversation; the chat template only)."""
    if template == "plain" and context:
        raise ConfigError("template", "{template:plain} writes one user message, but this prompt holds a chat "
                                      "conversation; use {template:chat}")
    if template == "plain":
        return PLAIN_TEMPLATE.format(instruction=instruction), True, 0
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("template", "the model has no chat template; pass {template:plain} to use "
                                      + literal(repr(PLAIN_TEMPLATE.format(instruction="<instruction>")))
                                      + " (recorded in the capture)")
    try:
        text = tokenizer.apply_chat_template([*context, {"role": "user", "content": instruction}], tokenize=False,
                                             add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - a template may raise anything (jinja's raise_exception)
        raise ConfigError("template", "the model's chat template refuses a single user message ("
                                      + literal(_first_line(exc)) + "); pass {template:plain}") from None
    # The chat template already holds the special tokens (apply_chat_template(tokenize=True) does the same).
    start = text.rfind(instruction) if context else text.find(instruction)  # the last user message's
    if start < 0:
        raise ConfigError("template", "the model's chat template rewrites the user message, so its items "
                                      "cannot be located; pass {template:plain}")
    return text, False, start


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else exc.__class__.__name__


def _check_items(tokenizer, text: str, ids, offsets, spans: np.ndarray, items, rule: str = "own",
                 pairs: bool = True) -> tuple[np.ndarray, str | None]:
    """Each item's token index, and why the items of this tokenized prompt break the task's ``rule``
    (:func:`~countlens.llm.tasks.item_problem`) or, for a task of token ``pairs``, do not map to one token id
    per kind (``None`` when they do)."""
    positions, problem = item_problem(tokenizer, text, ids, offsets, spans, rule)
    if problem or not pairs or not len(spans):
        return positions, problem
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
            ids, offsets = (x[0] for x in encode(tokenizer, [text], special))
            _, problem = _check_items(tokenizer, text, ids, offsets, spans + start, items)
            if problem:
                return f"{problem} in the {config} wording"
    return None


def single_token_pairs(tokenizer, candidates, configs=tuple(CONFIGURATIONS), template: str = "chat") -> dict:
    """``{pair name: None if every item is one token of its own in these wordings, else why not}``."""
    return {pair_name(p): pair_problem(tokenizer, p, configs, template) for p in candidates}


def build_prompts(tokenizer, settings: PromptSettings) -> list[Prompt]:
    """All prompts of ``settings``, tokenized, in grid order (seed, config, pair, count, k), in its task
    (:mod:`countlens.llm.tasks`).

    Every item's token comes from its character span under the task's rule (for ``lists``, every item one
    token of its own, giving ``n`` target and ``m`` distractor tokens); the text after the user's message
    (the generation prompt) and the boundary token must be the same for every prompt. Raises
    :class:`ConfigError` (``pairs``, ``task`` or ``template``) otherwise, naming the default pairs that do work
    for a pair that does not.
    """
    task = settings.counting_task()
    if task.uses_pairs:
        _check_pairs(tokenizer, settings)
    prompts: list[Prompt] = []
    ending: str | None = None
    for group in task.grid(settings):
        rendered = []
        for drawn in group:
            instruction = drawn.instruction
            text, special, start = render(tokenizer, instruction.text, settings.template, instruction.context)
            rendered.append((drawn, text, instruction.spans + start, text[start + len(instruction.text):]))
        encoded = encode(tokenizer, [r[1] for r in rendered], special)
        for (drawn, text, spans, tail), ids, offsets in zip(rendered, *encoded, strict=True):
            ending = tail if ending is None else ending
            if tail != ending:
                raise ConfigError("template", "the chat template ends prompts differently after the "
                                  f"user's message ({literal(repr(ending))} vs {literal(repr(tail))}); "
                                  "pass {template:plain}")
            targets = drawn.instruction.targets
            positions, problem = _check_items(tokenizer, text, ids, offsets, spans, targets, task.rule,
                                              task.uses_pairs)
            if problem:
                where = drawn.source or (f"in the prompt n={drawn.n}, m={len(targets) - drawn.n}, config "
                                         f"{drawn.config}, seed {drawn.seed}")
                if task.uses_pairs:
                    raise ConfigError("pairs", literal(f"pair {drawn.pair} {where}: {problem}") + "; it merges "
                                      "with a neighbour here though not everywhere; choose other {pairs}")
                raise ConfigError("task", "{task}: " + literal(f"{problem} {where}") + "; the model's tokenizer "
                                  "cannot tell these items apart")
            prompts.append(Prompt(n=drawn.n, m=drawn.instruction.m, pair=drawn.pair, config=drawn.config,
                                  seed=drawn.seed, prompt=text, ids=ids,
                                  first_item_index=int(positions[0]) if len(positions) else -1,
                                  last_item_index=int(positions[-1]) if len(positions) else -1,
                                  item_indices=tuple(int(i) for i in positions),
                                  item_targets=tuple(bool(t) for t in targets)))
    if len({p.ids[-1] for p in prompts}) != 1:
        raise ConfigError("template", "prompts end in different boundary tokens; the chat template does not end "
                                      "the same way for every prompt; pass {template:plain}")
    return prompts


def _check_pairs(tokenizer, settings: PromptSettings) -> None:
    """``ConfigError`` naming ``pairs`` for a pair that is not one token per item in these wordings, naming
    the default pairs that do work."""
    for pair in settings.pairs:
        problem = pair_problem(tokenizer, pair, settings.configs, settings.template)
        if problem:
            working = [pair_name(p) for p in DEFAULT_PAIRS
                       if pair_problem(tokenizer, p, settings.configs, settings.template) is None]
            hint = (f"of the defaults, {', '.join(working)} work for this model" if working
                    else "none of the defaults works for this model")
            raise ConfigError("pairs", literal(f"pair {pair_name(pair)} is not one token per item for this "
                                               f"model: {problem}; {hint}") + "; choose other {pairs}")


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


__all__ = ["CANDIDATE_PAIRS", "CONFIGURATIONS", "DEFAULT_PAIRS", "DEFAULT_L", "DEFAULT_COUNTS", "DEFAULT_SEEDS",
           "TEMPLATES", "PLAIN_TEMPLATE", "PromptSettings", "Prompt", "pair_name", "parse_pairs", "arrangement",
           "instruction_parts", "item_positions", "render", "pair_problem", "single_token_pairs", "build_prompts",
           "boundary_tokens", "mark_boundary"]
