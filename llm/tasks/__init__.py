"""Counting tasks (docs/definitions.md §2.2 and §2.8): the registry (``--task NAME[:options]``), the
built-in tasks in declaration order (``lists``, ``repeat``, ``letters``, ``objects``, ``file:PATH``) and the one
span -> token function every task's items go through (:mod:`countlens.llm.tasks.spans`)."""

from countlens.llm.tasks.file import FILE_WORDING, check_record, read_records
from countlens.llm.tasks.letters import letter_parts
from countlens.llm.tasks.lists import (
    CANDIDATE_PAIRS,
    CONFIGURATIONS,
    DEFAULT_PAIRS,
    arrangement,
    instruction_parts,
    pair_name,
)
from countlens.llm.tasks.objects import CATEGORIES, draw_objects, object_parts
from countlens.llm.tasks.registry import (
    DEFAULT_TASK,
    TASKS,
    Drawn,
    Instruction,
    Task,
    TaskOption,
    declare_task,
    flipped_target,
    parse_task,
    task_help,
)
from countlens.llm.tasks.repeat import SEPARATORS, repeat_parts
from countlens.llm.tasks.spans import RULES, encode, item_positions, item_problem, span_tokens

__all__ = ["DEFAULT_TASK", "TASKS", "Drawn", "Instruction", "Task", "TaskOption", "declare_task", "parse_task",
           "task_help", "CANDIDATE_PAIRS", "CONFIGURATIONS", "DEFAULT_PAIRS", "arrangement", "instruction_parts",
           "pair_name", "SEPARATORS", "repeat_parts", "letter_parts", "RULES", "encode", "item_positions",
           "item_problem", "span_tokens", "flipped_target", "CATEGORIES", "object_parts", "draw_objects",
           "FILE_WORDING", "check_record", "read_records"]
