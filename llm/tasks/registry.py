"""The task registry: each counting task declared once, chosen by ``--task NAME[:option=value,...]``.

A task turns ``(count, wording, seed, ...)`` into a user message with the character spans of its items and
which items are targets (docs/definitions.md §2.8); :func:`countlens.llm.prompts.build_prompts` renders it in the chat
template and finds the items' tokens (:mod:`countlens.llm.tasks.spans`, under the task's ``rule``). A task
declares its options (defaults and checks), its wordings (``{items}`` marks where the items go), its answer
format, its item rule, whether it draws target/distractor ``pairs`` and whether a corrupted twin of the same
token length exists (position patching, the heads' ablation).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, literal

DEFAULT_TASK = "lists"


@dataclass(frozen=True)
class TaskOption:
    """One option of a task: its ``name``, ``default`` (text), ``help``, and ``check(value, name)`` returning
    the accepted value (a :class:`ConfigError` naming ``name`` otherwise; :mod:`countlens.core.fields` rules)."""

    name: str
    default: str
    help: str
    check: Callable[[Any, str], Any] | None = None


@dataclass(frozen=True)
class Instruction:
    """A user message and its items: ``spans`` (n_items, 2) ``[start, end)`` characters in ``text``,
    ``targets`` (n_items,) True for a counted item; ``n`` targets and ``m`` other items. ``context``: the chat
    messages before it (``({"role": ..., "content": ...}, ...)``; a ``file`` task's conversation), rendered
    with it in the chat template; empty for the built-in tasks."""

    text: str
    spans: np.ndarray
    targets: np.ndarray
    context: tuple = ()

    @property
    def n(self) -> int:
        return int(np.count_nonzero(self.targets))

    @property
    def m(self) -> int:
        return len(self.targets) - self.n


@dataclass(frozen=True)
class Drawn:
    """One prompt of a task's grid before rendering: its grid keys and its :class:`Instruction`."""

    n: int
    seed: int
    config: str
    pair: str
    k: int
    instruction: Instruction
    source: str = ""  # where the prompt comes from when its grid keys do not say (a file's record: "line 7")


class Task(ABC):
    """A counting task (subclasses declare the class attributes and :meth:`instruction`).

    ``name``, ``summary`` (what it is for, one line), ``example`` (its ``--task`` text), ``options``,
    ``wordings`` (name -> text with ``{items}``, and ``{target}`` where the task names what it counts),
    ``answer`` (the answer format the wordings ask for), ``rule`` (``own``, ``whole`` or ``shared``:
    :mod:`countlens.llm.tasks.spans`), ``uses_pairs`` (draws the settings' target/distractor pairs) and
    ``twins`` (a corrupted twin of the same token length exists), ``seeded`` (False where a prompt depends on
    its count alone: the grid then takes the first seed and one prompt per count, so no prompt is written
    twice); ``order`` places it in the registry's listing. ``values`` holds the checked options.

    A task with ``twins`` says, in :meth:`replacements`, what may stand in a target's place so that the item
    is no longer counted (tried in order under the model's tokenizer until one keeps every other token:
    :func:`countlens.llm.positions.experiment.corrupted_twin`); a task without says why in ``no_twin``.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    example: ClassVar[str]
    options: ClassVar[tuple[TaskOption, ...]] = ()
    wordings: ClassVar[Mapping[str, str]]
    answer: ClassVar[str] = "a number"
    rule: ClassVar[str] = "whole"
    uses_pairs: ClassVar[bool] = False
    twins: ClassVar[bool] = False
    no_twin: ClassVar[str] = ""  # why no corrupted twin exists (said where an analysis needs one)
    seeded: ClassVar[bool] = True  # False: a prompt depends on its count alone (one seed, one prompt per count)
    uses_L: ClassVar[bool] = True  # False: L bounds nothing (the prompt's length follows its count or its record)
    order: ClassVar[int] = 100  # the place in the registry's listing (the built-ins 0, 1, 2, ...)

    def __init__(self, **given: str):
        declared = {o.name: o for o in self.options}
        unknown = [k for k in given if k not in declared]
        if unknown:
            takes = f"the options {', '.join(declared)}" if declared else "no options"
            raise ConfigError("task", f"{{task}}: {self.name} takes {literal(takes)}, got "
                                      f"{literal(repr(unknown[0]))}")
        self.given = {k: given[k] for k in declared if k in given}
        self.values: dict[str, Any] = {}
        for name, option in declared.items():
            value = given.get(name, option.default)
            try:
                self.values[name] = option.check(value, name) if option.check else value
            except ConfigError as exc:
                raise ConfigError("task", f"{{task}}: {self.name} " + literal(str(exc))) from None

    @property
    def text(self) -> str:
        """The task as ``--task`` writes it, options the user gave in declared order (``repeat:separator=comma``)."""
        return self.name + (":" + ",".join(f"{k}={v}" for k, v in self.given.items()) if self.given else "")

    def labels(self, settings) -> list[tuple[str, Any]]:
        """The groups of prompts within one seed and wording: ``(label, group)``; the label is the prompts'
        ``pair`` column (one group per token pair for a task that uses pairs)."""
        return [(self.label(), None)]

    def label(self) -> str:
        """The ``pair`` column of a task that draws no pairs: what it counts."""
        return self.name

    def digest(self) -> str | None:
        """What a capture's resume key must hold beyond the task's text: ``None`` for a task whose prompts its
        text and the settings fix; a digest of the prompts' content for one that reads them from elsewhere (a
        ``file``), so an edited file is never resumed into a capture of the old one."""
        return None

    @abstractmethod
    def instruction(self, config: str, group: Any, n: int, k: int, seed: int, L: int) -> Instruction:
        """The user message of prompt ``k`` of count ``n`` in wording ``config`` and ``group``, for ``seed``
        and at most ``L`` items, with its items' spans and targets."""

    @property
    def located(self) -> bool:
        """Whether the prompts say where their items are (every built-in task; a ``file`` task with spans)."""
        return True

    def settle(self, settings) -> None:
        """Check (or fill in) the prompt settings this task reads differently from the built-ins, when the
        settings are validated (before any tokenizer): a :class:`ConfigError` naming the field otherwise.
        The built-in tasks read every setting as documented, so they accept any."""
        return None

    def group_of(self, label: str, settings) -> Any:
        """The group (:meth:`labels`) whose prompts carry ``label`` in their ``pair`` column."""
        return dict(self.labels(settings)).get(label)

    def replacements(self, clean: Instruction, j: int, group: Any, seed: int) -> list[str]:
        """The texts that may replace target item ``j`` of ``clean`` (its :meth:`twin_region`; the
        prompt's ``group`` and ``seed``) so that it is no longer counted, in the order to try them; only a task
        with ``twins`` has them."""
        raise ConfigError("task", f"{{task}}: {literal(self.name)} defines no corrupted twin ({literal(self.no_twin)})")

    def twin(self, config: str, label: str, n: int, k: int, seed: int, settings,
             flip: str) -> tuple[Instruction, int, list[Instruction]]:
        """The clean user message of prompt ``k`` of count ``n`` (``config``, ``label``, ``seed``), the index
        ``j`` of the target ``flip`` turns (``first``, ``middle`` — the lower middle — or ``last``), and the
        candidate twins: the message with item ``j``'s characters replaced by each of :meth:`replacements`
        (item ``j`` no longer a target, the spans after it shifted), in the order to try them."""
        group = self.group_of(label, settings)
        clean = self.instruction(config, group, n, k, seed, settings.L)
        j = flipped_target(clean.targets, flip)
        a, b = self.twin_region(clean, j)
        turned = clean.targets.copy()
        turned[j] = False
        twins = []
        for word in self.replacements(clean, j, group, seed):
            spans = clean.spans.copy()
            spans[j + 1:] += len(word) - (b - a)
            spans[j, 1] += len(word) - (b - a)
            twins.append(Instruction(clean.text[:a] + word + clean.text[b:], spans, turned, clean.context))
        return clean, j, twins

    def twin_region(self, clean: Instruction, j: int) -> tuple[int, int]:
        """The characters ``[a, b)`` of ``clean`` that :meth:`replacements` replace to turn item ``j``: the
        item's span (it ends where the item ends); the twin's tokens may differ only over them."""
        return int(clean.spans[j, 0]), int(clean.spans[j, 1])

    def grid(self, settings) -> Iterator[list[Drawn]]:
        """The task's prompts in groups of one (seed, wording, label), each in (count, k) order; the groups in
        (seed, wording, label) order (the order of :func:`~countlens.llm.prompts.build_prompts`)."""
        seeds, per_count = (settings.seeds, settings.per_count) if self.seeded else (settings.seeds[:1], 1)
        for seed in seeds:
            for config in settings.configs:
                for label, group in self.labels(settings):
                    yield [Drawn(n, seed, config, label, k, self.instruction(config, group, n, k, seed, settings.L))
                           for n in settings.counts for k in range(per_count)]

    def size(self, settings) -> int:
        """The number of prompts :meth:`grid` draws."""
        seeds, per_count = (len(settings.seeds), settings.per_count) if self.seeded else (1, 1)
        return len(settings.counts) * per_count * len(self.labels(settings)) * len(settings.configs) * seeds


def flipped_target(targets: np.ndarray, flip: str) -> int:
    """The index (among the items) of the target ``flip`` turns: the first, middle (lower) or last target of
    ``targets`` (n_items,) bools."""
    where = np.flatnonzero(np.asarray(targets))
    return int(where[{"first": 0, "middle": (len(where) - 1) // 2, "last": len(where) - 1}[flip]])


TASKS: dict[str, type[Task]] = {}


def declare_task(task: type[Task]) -> type[Task]:
    """Register ``task`` under its name (a class decorator); the registry lists tasks by their ``order``."""
    TASKS[task.name] = task
    listed = sorted(TASKS.values(), key=lambda t: t.order)
    TASKS.clear()
    TASKS.update((t.name, t) for t in listed)
    return task


def parse_task(text: str) -> Task:
    """The task ``text`` names: ``NAME`` or ``NAME:option=value,...`` (``file:PATH`` is ``file:path=PATH``);
    a one-line :class:`ConfigError` naming ``task`` for an unknown task, option or value."""
    name, _, rest = str(text).strip().partition(":")
    if name not in TASKS:
        raise ConfigError("task", f"{{task}} must be one of {literal(', '.join(TASKS))}, got {literal(repr(name))}")
    task = TASKS[name]
    given: dict[str, str] = {}
    if rest and task.options and "=" not in rest.split(",")[0] and task.options[0].name == "path":
        given["path"] = rest  # file:PATH (a path may hold commas)
    elif rest:
        for part in rest.split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise ConfigError("task", f"{{task}}: {name}'s options are written option=value, separated by "
                                          f"commas, got {literal(repr(part))}")
            if key.strip() in given:
                raise ConfigError("task", f"{{task}}: {name} option {literal(repr(key.strip()))} given twice")
            given[key.strip()] = value.strip()
    return task(**given)


def task_help() -> str:
    """One line per task for ``--task``'s help: its example and what it is for."""
    return "; ".join(f"{t.example}: {t.summary}" for t in TASKS.values())


__all__ = ["DEFAULT_TASK", "TaskOption", "Instruction", "Drawn", "Task", "flipped_target", "TASKS", "declare_task", "parse_task",
           "task_help"]
