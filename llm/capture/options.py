"""The capture options, declared once for every command that takes them (``llm capture``, ``prompts``,
``pairs``, ``patch``, ``heads``, ``steer``, ``lens``, ``reproduce``, ``study``).

Each option is named by the config setting it sets (``gguf_file``, which lives in the config's
:class:`~countlens.llm.models.ModelSpec`); its flag is that name with dashes, so a
:class:`~countlens.core.errors.ConfigError` about a setting is worded with the flag of whichever command ran,
and a help text names another option as ``{setting}``. :func:`add_capture_options` adds a chosen few to any
command's parser and :func:`capture_options` reads them back as settings by name, for
``CaptureConfig.with_options``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from countlens.core.args import INT_LIST, ints_text, parse_int_list
from countlens.core.fields import field_default
from countlens.core.options import option_value
from countlens.llm.capture.experiment import ACTS_DTYPES, PADDING_SIDES, CaptureConfig
from countlens.llm.capture.residuals import BACKENDS, POSITIONS
from countlens.llm.models import DTYPES
from countlens.llm.prompts import CONFIGURATIONS, TEMPLATES, parse_pairs
from countlens.llm.tasks import task_help


def names_list(text: str, field: str = "") -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]`` (the config checks the names)."""
    return [c.strip() for c in str(text).split(",") if c.strip()]


def parse_counts(text: str, field: str = "counts") -> list[int]:
    """A set of counts in the one integer-list grammar (:func:`~countlens.core.args.parse_int_list`), sorted,
    each once."""
    return parse_int_list(text, field, sort=True)


@dataclass(frozen=True)
class CaptureOption:
    """One capture option: it sets the config setting ``dest``; its :attr:`flag` is that name with dashes, and
    its ``help`` names another option as ``{setting}`` (:meth:`worded`). ``type`` and ``choices`` go to
    argparse; ``switch`` makes it a flag without a value; ``parse(text, dest)`` turns the option's text
    into the setting's value (a :class:`ConfigError` naming ``dest`` on bad text), ``text(value)`` the
    setting's value into the option's text (its default)."""

    dest: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False
    parse: Callable[[str, str], Any] | None = None
    text: Callable[[Any], Any] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    def worded(self) -> str:
        """The help text with each ``{setting}`` of another capture option written as its flag."""
        return re.sub(r"\{(\w+)\}", lambda m: CAPTURE_OPTIONS[m[1]].flag if m[1] in CAPTURE_OPTIONS else m[0],
                      self.help)

    def shown(self, value: Any) -> Any:
        """``value`` as the option's text."""
        return self.text(value) if self.text is not None else value


CAPTURE_OPTIONS: dict[str, CaptureOption] = {o.dest: o for o in (
    CaptureOption("model", "hub id (org/name), model folder, .gguf file, or 'default' (the embedded "
                                      "SmolLM2-135M-Instruct)"),
    CaptureOption("gguf_file", "GGUF file inside {model}'s folder or hub repo, or a path to one "
                                                  "(default: none)"),
    CaptureOption("revision", "hub branch, tag or commit of {model} (offline: must be in the Hugging "
                                            "Face cache; default: main)"),
    CaptureOption("trust_remote_code", "run the model repo's own Python code (needed by "
                                                              "some architectures; recorded)", switch=True),
    CaptureOption("device", "cpu, cuda, cuda:N, mps, or auto (accelerate device map)"),
    CaptureOption("dtype", "model compute dtype", choices=DTYPES),
    CaptureOption("L", "maximum number of items n + m (repeat: unused beyond the counts' bound)", type=int),
    CaptureOption("counts", f"counts n: {INT_LIST}", parse=parse_counts, text=ints_text),
    CaptureOption("per_count", "prompts per (count, pair, configuration, seed)", type=int),
    CaptureOption("pairs", "target/distractor pairs, each item one token (see `countlens llm pairs`)",
                  parse=lambda text, field: parse_pairs(text), text=lambda v: ",".join("/".join(p) for p in v)),
    CaptureOption("configs", f"instruction wordings of the task, among {', '.join(CONFIGURATIONS)}", parse=names_list,
                  text=",".join),
    CaptureOption("seeds", f"prompt seeds: {INT_LIST}", parse=parse_int_list, text=ints_text),
    CaptureOption("task", "the counting task, NAME or NAME:option=value,... (" + task_help() + ")"),
    CaptureOption("template", "chat: the model's chat template; plain: '<instruction>\\nAnswer:' "
                                            "for models without one", choices=TEMPLATES),
    CaptureOption("locations", "locations to keep: names, indices (0 = embed, l = output of block "
                                              "l-1, -1 = last), ranges like 0:6 or with a step 0:-1:4, or all; the "
                                              "forward pass stops after the last one", text=lambda v: "all" if v is None else v),
    CaptureOption("batch_size", "prompts per forward pass", type=int),
    CaptureOption("backend", "hf: forward hooks; transformer-lens: TransformerBridge (adds "
                                          "hook_resid_mid)", choices=BACKENDS),
    CaptureOption("acts_dtype", "stored activation dtype", choices=ACTS_DTYPES),
    CaptureOption("padding_side", "batch padding side (results agree to float rounding)",
                  choices=PADDING_SIDES),
    CaptureOption("shard_rows", "prompts per shard on disk, the unit an interrupted run resumes "
                                                "from (an items capture's shard holds all its prompts' rows)",
                  type=int),
    CaptureOption("positions", "boundary: one row per prompt; items: also the residual at every "
                                              "item token, from the same forward pass (one row per prompt and "
                                              "position, columns prompt_id, position, item_index, is_target, "
                                              "running_count; prints its size on disk first)", choices=POSITIONS),
    CaptureOption("answers", "also record the model's own greedy answer to every prompt (columns "
                                          "answer_text, answer, answer_logprob), decoded from the capture's own "
                                          "prompt pass: a few decode steps per prompt, not a second pass (so this "
                                          "is a capture option, not a command over an existing capture), and "
                                          "the answer as a distribution over the counts min..max of {counts} "
                                          "(answer_logprobs, answer_expected, answer_rank), every candidate "
                                          "teacher-forced from the same pass; runs the whole model, left-padded",
                  switch=True),
    CaptureOption("answer_tokens", "most new tokens per answer (small chat models write a short "
                                                      "sentence first)", type=int),
    CaptureOption("random_init", "capture a model of the same architecture and tokenizer with "
                                                  "freshly initialised weights (a probe baseline; seeded by "
                                                  "{init_seed})", switch=True),
    CaptureOption("init_seed", "seed of {random_init}'s weights", type=int),
    CaptureOption("no_cache", "convert a GGUF model afresh: neither read nor write the converted "
                                            "tokenizer and float32 weights cached under $COUNTLENS_CACHE (default "
                                            "$XDG_CACHE_HOME/countlens or ~/.cache/countlens)", switch=True),
)}

MODEL_OPTIONS = ("model", "gguf_file", "revision", "trust_remote_code", "no_cache")
PROMPT_OPTIONS = (*MODEL_OPTIONS, "task", "L", "counts", "per_count", "pairs", "configs", "seeds", "template")


def add_capture_options(parser: argparse.ArgumentParser, names: Sequence[str], defaults: Any = None,
                        helps: dict[str, str] | None = None) -> None:
    """Add the capture options ``names`` (config settings, see :data:`CAPTURE_OPTIONS`) to ``parser``.

    ``defaults``: a config whose settings are the options' defaults (a :class:`CaptureConfig`, or another
    config holding the same settings, e.g. ``PatchingConfig()``), or a config type whose field defaults
    they are (a config that cannot be built without its required fields, e.g. ``SteeringConfig``);
    ``None`` leaves every option's value ``None`` unless given (so a preset decides), its help naming
    :class:`CaptureConfig`'s default.
    ``helps`` replaces the help of some options for this command.
    """
    shown_defaults = CaptureConfig()

    def default_of(name: str) -> Any:
        if isinstance(defaults, type):
            return field_default(defaults, name)
        return option_value(defaults, name)

    for name in names:
        option = CAPTURE_OPTIONS[name]
        text = (helps or {}).get(name) or option.worded()
        if option.switch:
            parser.add_argument(option.flag, dest=name, action="store_true", default=None if defaults is None
                                else bool(default_of(name)), help=text)
            continue
        if defaults is None:
            default = None
            shown = option.shown(option_value(shown_defaults, name))
            text = text if shown is None else f"{text} (default: {shown})"
        else:
            default = option.shown(default_of(name))
        parser.add_argument(option.flag, dest=name, type=option.type, choices=option.choices, default=default,
                            help=text)


def capture_options(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The settings the capture options ``names`` hold in ``args`` (parsed to their values), by name;
    options left ``None`` are left out. For ``CaptureConfig.with_options``."""
    values = {}
    for name in names:
        value = getattr(args, name, None)
        if value is None:
            continue
        option = CAPTURE_OPTIONS[name]
        values[name] = option.parse(value, name) if option.parse and isinstance(value, str) else value
    return values


__all__ = ["CaptureOption", "CAPTURE_OPTIONS", "MODEL_OPTIONS", "PROMPT_OPTIONS", "add_capture_options",
           "capture_options", "names_list", "parse_counts"]
