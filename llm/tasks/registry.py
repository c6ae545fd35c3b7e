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
    ``targets`` (n_items,) True for a counted item; ``n`` targets and ``m`` other items."""

    text: str
    spans: np.ndarray
    targets: np.ndarray

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


class Task(ABC):
    """A counting task (subclasses declare the class attributes and :meth:`instruction`).

    ``name``, ``summary`` (what it is for, one line), ``example`` (its ``--task`` text), ``options``,
    ``wordings`` (name -> text with ``{items}``, and ``{target}`` where the task names what it counts),
    ``answer`` (the answer format the wordings ask for), ``rule`` (``own``, ``whole`` or ``shared``:
    :mod:`countlens.llm.tasks.spans`), ``uses_pairs`` (draws the settings' target/distractor pairs) and
    ``twins`` (a corrupted twin of the same token length exists), ``seeded`` (False where a prompt depends on
    its count alone: the grid then takes the first seed and one prompt per count, so no prompt is written
    twice); ``order`` places it in the registry's listing. ``values`` holds the checked options.
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
    seeded: ClassVar[bool] = True  # False: a prompt depends on its count alone (one seed, one prompt per count)
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

    @abstractmethod
    def instruction(self, config: str, group: Any, n: int, k: int, seed: int, L: int) -> Instruction:
        """The user message of prompt ``k`` of count ``n`` in wording ``config`` and ``group``, for ``seed``
        and at most ``L`` items, with its items' spans and targets."""

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


__all__ = ["DEFAULT_TASK", "TaskOption", "Instruction", "Drawn", "Task", "TASKS", "declare_task", "parse_task",
           "task_help"]
