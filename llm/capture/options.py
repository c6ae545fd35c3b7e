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
from collections.abc import Sequence
from typing import Any

from countlens.core.args import (
    INT_LIST,
    Option,
    add_config_options,
    config_values,
    ints_text,
    names_list,
    parse_int_list,
)
from countlens.core.fields import field_doc, field_owner
from countlens.llm.capture.experiment import ACTS_DTYPES, PADDING_SIDES, CaptureConfig
from countlens.llm.capture.residuals import BACKENDS, POSITIONS
from countlens.llm.models import DTYPES
from countlens.llm.prompts import CONFIGURATIONS, TEMPLATES, parse_pairs
from countlens.llm.tasks import task_help


def parse_counts(text: str, field: str = "counts") -> list[int]:
    """A set of counts in the one integer-list grammar (:func:`~countlens.core.args.parse_int_list`), sorted,
    each once."""
    return parse_int_list(text, field, sort=True)


# The capture settings' options: what each command that sets them shares (help, parsing) beyond what their
# fields give (:class:`~countlens.core.args.Option`).
CAPTURE_OPTIONS: dict[str, Option] = {o.dest: o for o in (
    Option("model", "hub id (org/name), model folder, .gguf file, or 'default' (the embedded "
                                      "SmolLM2-135M-Instruct)"),
    Option("gguf_file", "GGUF file inside {model}'s folder or hub repo, or a path to one "
                                                  "(default: none)"),
    Option("revision", "hub branch, tag or commit of {model} (offline: must be in the Hugging "
                                            "Face cache; default: main)"),
    Option("trust_remote_code", "run the model repo's own Python code (needed by "
                                                              "some architectures; recorded)", switch=True),
    Option("device", "cpu, cuda, cuda:N, mps, or auto (accelerate device map)"),
    Option("dtype", "model compute dtype", choices=DTYPES),
    Option("L", "maximum number of items n + m (repeat: unused beyond the counts' bound)", type=int),
    Option("counts", f"counts n: {INT_LIST}", parse=parse_counts, text=ints_text),
    Option("per_count", "prompts per (count, pair, configuration, seed)", type=int),
    Option("pairs", "target/distractor pairs, each item one token (see `countlens llm pairs`)",
                  parse=lambda text, field: parse_pairs(text), text=lambda v: ",".join("/".join(p) for p in v)),
    Option("configs", f"instruction wordings of the task, among {', '.join(CONFIGURATIONS)}", parse=names_list,
                  text=",".join),
    Option("seeds", f"prompt seeds: {INT_LIST}", parse=parse_int_list, text=ints_text),
    Option("task", "the counting task, NAME or NAME:option=value,... (" + task_help() + ")"),
    Option("template", "chat: the model's chat template; plain: '<instruction>\\nAnswer:' "
                                            "for models without one", choices=TEMPLATES),
    Option("locations", "locations to keep: names, indices (0 = embed, l = output of block "
                                              "l-1, -1 = last), ranges like 0:6 or with a step 0:-1:4, or all; the "
                                              "forward pass stops after the last one", text=lambda v: "all" if v is None else v),
    Option("batch_size", "prompts per forward pass", type=int),
    Option("backend", "hf: forward hooks; transformer-lens: TransformerBridge (adds "
                                          "hook_resid_mid)", choices=BACKENDS),
    Option("acts_dtype", "stored activation dtype", choices=ACTS_DTYPES),
    Option("padding_side", "batch padding side (results agree to float rounding)",
                  choices=PADDING_SIDES),
    Option("shard_rows", "prompts per shard on disk, the unit an interrupted run resumes "
                                                "from (an items capture's shard holds all its prompts' rows)",
                  type=int),
    Option("positions", "boundary: one row per prompt; items: also the residual at every "
                                              "item token, from the same forward pass (one row per prompt and "
                                              "position, columns prompt_id, position, item_index, is_target, "
                                              "running_count; prints its size on disk first)", choices=POSITIONS),
    Option("answers", "also record the model's own greedy answer to every prompt (columns "
                                          "answer_text, answer, answer_logprob), decoded from the capture's own "
                                          "prompt pass: a few decode steps per prompt, not a second pass (so this "
                                          "is a capture option, not a command over an existing capture), and "
                                          "the answer as a distribution over the counts min..max of {counts} "
                                          "(answer_logprobs, answer_expected, answer_rank), every candidate "
                                          "teacher-forced from the same pass; runs the whole model, left-padded",
                  switch=True),
    Option("answer_tokens", "most new tokens per answer (small chat models write a short "
                                                      "sentence first)", type=int),
    Option("random_init", "capture a model of the same architecture and tokenizer with "
                                                  "freshly initialised weights (a probe baseline; seeded by "
                                                  "{init_seed})", switch=True),
    Option("init_seed", "seed of {random_init}'s weights", type=int),
    Option("no_cache", "convert a GGUF model afresh: neither read nor write the converted "
                                            "tokenizer and float32 weights cached under $COUNTLENS_CACHE (default "
                                            "$XDG_CACHE_HOME/countlens or ~/.cache/countlens)", switch=True),
)}

MODEL_OPTIONS = ("model", "gguf_file", "revision", "trust_remote_code", "no_cache")
PROMPT_OPTIONS = (*MODEL_OPTIONS, "task", "L", "counts", "per_count", "pairs", "configs", "seeds", "template")


def add_capture_options(parser: argparse.ArgumentParser, names: Sequence[str], defaults: Any = None,
                        helps: dict[str, str] | None = None,
                        options: dict[str, Option] | None = None) -> list[argparse.Action]:
    """Add the options of the settings ``names`` to ``parser``: the capture options (:data:`CAPTURE_OPTIONS`)
    and any other field of ``defaults``' config, each derived from its field
    (:func:`~countlens.core.args.add_config_options`).

    ``defaults``: a config whose settings are the options' defaults (a :class:`CaptureConfig`, or another
    config holding the same settings, e.g. ``PatchingConfig()``), or a config type whose field defaults
    they are (a config that cannot be built without its required fields, e.g. ``SteeringConfig``);
    ``None`` leaves every option's value ``None`` unless given (so a preset decides), its help naming
    :class:`CaptureConfig`'s default.
    ``helps`` replaces the help of some options for this command; ``options`` says what else differs (an
    alias, a required option).
    """
    config = CaptureConfig if defaults is None else defaults
    kind = config if isinstance(config, type) else type(config)
    shared = {n: CAPTURE_OPTIONS[n] for n in names if n in CAPTURE_OPTIONS and not _own_setting(kind, n)}
    return add_config_options(parser, config, names, options={**shared, **(options or {})}, unset=defaults is None,
                              helps=helps)


def _own_setting(config_type: type, name: str) -> bool:
    """Whether ``config_type`` documents a field ``name`` of its own, not the capture's setting of that name
    (``AttributionConfig.positions``: which positions are patched, not which rows a capture keeps)."""
    owner = field_owner(config_type, name)[0]
    return owner is not field_owner(CaptureConfig, name)[0] and field_doc(config_type, name) is not None


def capture_options(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The settings ``names`` the options of the command that ran hold in ``args`` (parsed to their values), by
    name; options left ``None`` are left out. For ``CaptureConfig.with_options``."""
    return {k: v for k, v in config_values(args).items() if k in names}


__all__ = ["CAPTURE_OPTIONS", "MODEL_OPTIONS", "PROMPT_OPTIONS", "add_capture_options",
           "capture_options", "parse_counts"]
