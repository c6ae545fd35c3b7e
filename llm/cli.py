"""``countlens llm``: the area of the chat-model commands. Each experiment folder's command module adds its own
subcommands (``register(sub)``), found through the experiments' declarations (their ``cli``): capture, prompts
and pairs (:mod:`countlens.llm.capture.cli`), patch (Figures 9a and 11, :mod:`countlens.llm.patching.cli`),
steer (9b), heads (12), lens (13), components (14), attribution (15), diagnose, and whatever a new experiment
declares. The model organism's commands are ``countlens organism`` (:mod:`countlens.llm.organisms.cli`).
"""

from __future__ import annotations

import importlib

from countlens.core.args import HelpFormatter

DESCRIPTION = """\
Capture a chat model's residual stream at the assistant boundary on counting prompts
(docs/definitions.md §2): every prompt asks to count a target item among distractors; the vector at the
prompt's last token (the end of the chat template's generation prompt) is kept at every residual location.
The activation folder `llm capture` writes is read by `countlens probe`, `geometry` and `compare`.
"""

PROMPTS_MODULE = "countlens.llm.capture.cli"  # also adds `llm prompts` and `llm pairs`, which run no experiment


def command_modules() -> tuple[str, ...]:
    """The command modules of the llm room, in report order: each experiment's declared ``cli``
    (:class:`countlens.core.registry.Experiment`), so a new experiment's commands appear by declaring them."""
    from countlens.core.registry import discover

    return tuple(dict.fromkeys([PROMPTS_MODULE, *(e.cli for e in discover("countlens.llm") if e.cli)]))


def register(subparsers) -> None:
    """Add ``countlens llm`` and every command module's subcommands under it."""
    llm = subparsers.add_parser("llm", help="capture a chat model's boundary residual stream on counting prompts",
                                description=DESCRIPTION, formatter_class=HelpFormatter)
    sub = llm.add_subparsers(dest="llm_command", metavar="LLM_COMMAND", parser_class=type(llm))
    sub.required = True
    for module in command_modules():
        importlib.import_module(module).register(sub)


__all__ = ["DESCRIPTION", "PROMPTS_MODULE", "command_modules", "register"]
