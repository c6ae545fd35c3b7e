"""``countlens llm capture``, ``prompts``, ``pairs``, ``patch`` and ``steer``: parse, build a config, run, save.

The capture's command-line options are declared once, in :data:`CAPTURE_OPTIONS`: each option's ``dest`` is
the config setting it sets (``--gguf-file`` sets ``gguf_file``, which lives in the config's
:class:`~countlens.llm.models.ModelSpec`), so a :class:`~countlens.core.errors.ConfigError` about a setting
is worded with the flag of whichever command ran. :func:`add_capture_options` adds a chosen few to any
command's parser (``reproduce`` and ``study`` too) and :func:`capture_options` reads them back as settings
by name, for ``CaptureConfig.with_options``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from countlens.core.args import HelpFormatter, parse_float_list, parse_int_list
from countlens.core.errors import ConfigError, UsageError
from countlens.llm.capture import BACKENDS
from countlens.llm.experiments.capture import ACTS_DTYPES, PADDING_SIDES, CaptureConfig
from countlens.llm.experiments.options import option_value
from countlens.llm.models import DTYPES
from countlens.llm.prompts import CANDIDATE_PAIRS, CONFIGURATIONS, TEMPLATES, parse_pairs

DESCRIPTION = """\
Capture a chat model's residual stream at the assistant boundary on counting prompts
(docs/definitions.md §2): every prompt asks to count a target item among distractors; the vector at the
prompt's last token (the end of the chat template's generation prompt) is kept at every residual location.
The activation folder `llm capture` writes is read by `countlens probe`, `geometry` and `compare`.
"""


def parse_counts(text: str, name: str = "--counts") -> list[int]:
    """``"0:100"``, ``"1,2,3"`` or mixed ``"0:10,90:100"`` (ranges inclusive) -> sorted unique ints."""
    values: list[int] = []
    try:
        for part in (p.strip() for p in str(text).split(",")):
            if not part:
                continue
            if ":" in part:
                lo, hi = (int(v) for v in part.split(":"))
                if hi < lo:
                    raise ValueError
                values.extend(range(lo, hi + 1))
            else:
                values.append(int(part))
    except ValueError:
        raise UsageError(f"{name} takes integers and inclusive ranges like 0:10,90:100, got {text!r}") from None
    if not values:
        raise UsageError(f"{name} must not be empty")
    return sorted(set(values))


def _ints_text(values) -> str:
    """``[0, 1, ..., 100]`` -> ``"0:100"``; other lists comma-separated."""
    values = list(values)
    if len(values) > 3 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}:{values[-1]}"
    return ",".join(str(v) for v in values)


def _names(text: str, flag: str) -> list[str]:
    return [c.strip() for c in str(text).split(",") if c.strip()]


@dataclass(frozen=True)
class CaptureOption:
    """One capture option: ``flag`` sets the config setting ``dest``. ``type`` and ``choices`` go to
    argparse; ``switch`` makes it a flag without a value; ``parse(text, flag)`` turns the option's text
    into the setting's value, ``text(value)`` the setting's value into the option's text (its default)."""

    flag: str
    dest: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False
    parse: Callable[[str, str], Any] | None = None
    text: Callable[[Any], Any] | None = None

    def shown(self, value: Any) -> Any:
        """``value`` as the option's text."""
        return self.text(value) if self.text is not None else value


CAPTURE_OPTIONS: dict[str, CaptureOption] = {o.dest: o for o in (
    CaptureOption("--model", "model", "hub id (org/name), model folder, .gguf file, or 'default' (the embedded "
                                      "SmolLM2-135M-Instruct)"),
    CaptureOption("--gguf-file", "gguf_file", "GGUF file inside --model's folder or hub repo, or a path to one"),
    CaptureOption("--revision", "revision", "hub branch, tag or commit of --model (offline: must be in the Hugging "
                                            "Face cache; default: main)"),
    CaptureOption("--trust-remote-code", "trust_remote_code", "run the model repo's own Python code (needed by "
                                                              "some architectures; recorded)", switch=True),
    CaptureOption("--device", "device", "cpu, cuda, cuda:N, mps, or auto (accelerate device map)"),
    CaptureOption("--dtype", "dtype", "model compute dtype", choices=DTYPES),
    CaptureOption("--L", "L", "maximum number of items n + m", type=int),
    CaptureOption("--counts", "counts", "counts n: a range 0:100, a list 1,2,3 or both 0:10,90:100 (inclusive)",
                  parse=parse_counts, text=_ints_text),
    CaptureOption("--per-count", "per_count", "prompts per (count, pair, configuration, seed)", type=int),
    CaptureOption("--pairs", "pairs", "target/distractor pairs, each item one token (see `countlens llm pairs`)",
                  parse=lambda text, flag: parse_pairs(text), text=lambda v: ",".join("/".join(p) for p in v)),
    CaptureOption("--configs", "configs", f"instruction wordings, among {', '.join(CONFIGURATIONS)}", parse=_names,
                  text=",".join),
    CaptureOption("--seeds", "seeds", "prompt seeds", parse=parse_int_list, text=_ints_text),
    CaptureOption("--template", "template", "chat: the model's chat template; plain: '<instruction>\\nAnswer:' "
                                            "for models without one", choices=TEMPLATES),
    CaptureOption("--locations", "locations", "locations to keep: names, indices (0 = embed, l = output of block "
                                              "l-1, -1 = last), ranges like 0:6, or all; the forward pass stops "
                                              "after the last one", text=lambda v: "all" if v is None else v),
    CaptureOption("--batch-size", "batch_size", "prompts per forward pass", type=int),
    CaptureOption("--backend", "backend", "hf: forward hooks; transformer-lens: TransformerBridge (adds "
                                          "hook_resid_mid)", choices=BACKENDS),
    CaptureOption("--acts-dtype", "acts_dtype", "stored activation dtype", choices=ACTS_DTYPES),
    CaptureOption("--padding-side", "padding_side", "batch padding side (results agree to float rounding)",
                  choices=PADDING_SIDES),
    CaptureOption("--shard-rows", "shard_rows", "prompts per shard on disk, the unit an interrupted run resumes "
                                                "from", type=int),
    CaptureOption("--answers", "answers", "also record the model's own greedy answer to every prompt (columns "
                                          "answer_text, answer, answer_logprob), decoded from the capture's own "
                                          "prompt pass: a few decode steps per prompt, not a second pass (so this "
                                          "is a capture option, not a command over an existing capture); runs "
                                          "the whole model, left-padded", switch=True),
    CaptureOption("--answer-tokens", "answer_tokens", "most new tokens per answer (small chat models write a short "
                                                      "sentence first)", type=int),
    CaptureOption("--random-init", "random_init", "capture a model of the same architecture and tokenizer with "
                                                  "freshly initialised weights (a probe baseline; seeded by "
                                                  "--init-seed)", switch=True),
    CaptureOption("--init-seed", "init_seed", "seed of --random-init's weights", type=int),
)}

MODEL_OPTIONS = ("model", "gguf_file", "revision", "trust_remote_code")
PROMPT_OPTIONS = (*MODEL_OPTIONS, "L", "counts", "per_count", "pairs", "configs", "seeds", "template")
CAPTURE_COMMAND = (*PROMPT_OPTIONS, "locations", "batch_size", "backend", "device", "dtype", "acts_dtype",
                   "padding_side", "shard_rows", "answers", "answer_tokens", "random_init", "init_seed")
PAIRS_COMMAND = (*MODEL_OPTIONS, "configs", "template")
PATCH_COMMAND = (*MODEL_OPTIONS, "L", "per_count", "pairs", "configs", "seeds", "template", "locations",
                 "batch_size", "answer_tokens", "device", "dtype")
STEER_COMMAND = ("batch_size", "answer_tokens", "device")


def add_capture_options(parser: argparse.ArgumentParser, names: Sequence[str], defaults: Any = None,
                        helps: dict[str, str] | None = None) -> None:
    """Add the capture options ``names`` (config settings, see :data:`CAPTURE_OPTIONS`) to ``parser``.

    ``defaults``: a config whose settings are the options' defaults (a :class:`CaptureConfig`, or another
    config holding the same settings, e.g. ``PatchingConfig()``); ``None`` leaves every option's value
    ``None`` unless given (so a preset decides), its help naming :class:`CaptureConfig`'s default.
    ``helps`` replaces the help of some options for this command.
    """
    shown_defaults = CaptureConfig()
    for name in names:
        option = CAPTURE_OPTIONS[name]
        text = (helps or {}).get(name, option.help)
        if option.switch:
            parser.add_argument(option.flag, dest=name, action="store_true", default=None if defaults is None
                                else bool(option_value(defaults, name)), help=text)
            continue
        if defaults is None:
            default = None
            shown = option.shown(option_value(shown_defaults, name))
            text = text if shown is None else f"{text} (default: {shown})"
        else:
            default = option.shown(option_value(defaults, name))
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
        values[name] = option.parse(value, option.flag) if option.parse and isinstance(value, str) else value
    return values


def register(subparsers) -> None:
    defaults = CaptureConfig()
    llm = subparsers.add_parser("llm", help="capture a chat model's boundary residual stream on counting prompts",
                                description=DESCRIPTION, formatter_class=HelpFormatter)
    sub = llm.add_subparsers(dest="llm_command", metavar="LLM_COMMAND", parser_class=type(llm))
    sub.required = True

    cap = sub.add_parser("capture", help="capture every layer's boundary vector for a counting prompt set",
                         description="Capture the boundary vector of every prompt at every residual location "
                                     "into an activation folder.\nChecks the model's tokenizer and config "
                                     "before its weights load; an interrupted run resumes.",
                         formatter_class=HelpFormatter)
    add_capture_options(cap, CAPTURE_COMMAND, defaults)
    cap.add_argument("--out", required=True, help="output folder (resumes an interrupted run with the same settings)")
    cap.add_argument("--ray", nargs="?", const="auto", default=None, metavar="auto|ADDRESS|local:N",
                     help="spread the shards over a Ray cluster, one worker per GPU or CPU slot: auto (the "
                          "cluster this machine joined), a cluster address, or local:N (N slots here); "
                          "--out must be on storage every node sees (default: no Ray, one process)")
    cap.add_argument("--quiet", action="store_true", help="no progress bar")
    cap.set_defaults(func=cmd_capture)

    _register_behaviour(sub)

    pr = sub.add_parser("prompts", help="print a few rendered prompts with the boundary token marked ⟦...⟧",
                        description="Print a few rendered prompts exactly as the model reads them, the boundary "
                                    "token marked ⟦...⟧.\nLoads only the tokenizer and the model's config.",
                        formatter_class=HelpFormatter)
    add_capture_options(pr, PROMPT_OPTIONS, defaults)
    pr.add_argument("--show", type=int, default=3, help="how many prompts to print")
    pr.set_defaults(func=cmd_prompts)

    pa = sub.add_parser("pairs", help="list the target/distractor pairs whose items are one token each",
                        description="List the candidate pairs whose items are each one token of their own in "
                                    "every chosen wording, for a model.\nLoads only the tokenizer.",
                        formatter_class=HelpFormatter)
    add_capture_options(pa, PAIRS_COMMAND, defaults, helps={"configs": "instruction wordings to check in"})
    pa.add_argument("--candidates", default=",".join("/".join(p) for p in CANDIDATE_PAIRS),
                    help="target/distractor pairs to try")
    pa.set_defaults(func=cmd_pairs)


def cmd_capture(args) -> int:
    from countlens.llm.experiments.capture import run_capture
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = CaptureConfig().with_options(**capture_options(args, CAPTURE_COMMAND)).validate()
    if args.ray is None:
        result = run_capture(config, args.out, progress=not args.quiet)
    else:
        from countlens.llm.distributed import run_capture_on_ray

        result = run_capture_on_ray(config, args.out, args.ray, progress=not args.quiet)
    meta = result.meta
    print(f"captured {meta['n_prompts']} prompts x {len(meta['locations'])} locations x {meta['d']} dims "
          f"-> {result.folder}")
    return 0


def cmd_prompts(args) -> int:
    from countlens.llm.experiments.capture import plan_capture
    from countlens.llm.models import quiet_transformers
    from countlens.llm.prompts import mark_boundary

    if args.show < 1:
        raise UsageError(f"--show must be >= 1, got {args.show}")
    quiet_transformers()
    plan = plan_capture(CaptureConfig().with_options(**capture_options(args, PROMPT_OPTIONS)))
    prompts = sorted(plan.prompts, key=lambda p: p.n)
    step = max(1, len(prompts) // args.show)
    for p in prompts[::step][:args.show]:
        print(f"--- n={p.n} m={p.m} pair={p.pair} config={p.config} seed={p.seed} tokens={p.n_tokens} "
              f"boundary_index={p.boundary_index} items={p.first_item_index}..{p.last_item_index}")
        print(mark_boundary(plan.tokenizer, p))
    print(f"--- {len(prompts)} prompts in all; the boundary token is marked ⟦...⟧")
    return 0


def cmd_pairs(args) -> int:
    from countlens.llm.experiments.capture import find_pairs
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    try:
        candidates = parse_pairs(args.candidates)
    except ConfigError as exc:
        raise exc.under("candidates") from None
    config = CaptureConfig().with_options(**capture_options(args, PAIRS_COMMAND))
    found = find_pairs(config, candidates)
    good = [name for name, problem in found.items() if problem is None]
    for name in good:
        print(name)
    print(f"--- {len(good)} of {len(found)} candidate pairs are one token per item for {args.model}"
          + (f"; use them with --pairs {','.join(good[:4])}" if good else ""))
    return 0


PATCH_DESCRIPTION = """\
Figure 9a: boundary activation patching. For prompt pairs that differ only in count (same seed, wording,
token pair and draw), the target prompt's boundary vector at location l is replaced by the source prompt's,
the forward continues, and the model's greedy answer is recorded: per location, the fraction of answers that
move to the source count, the mean shift of the parsed answer and the change of the correct answer's
log-probability. Only the boundary position is patched, so later blocks can still re-read the items: the
curve shows where the count is committed. Writes patching.json, patching.csv and fig9a_patching.png/.pdf.
"""

STEER_DESCRIPTION = """\
Figure 9b: steering along the probe. Adds delta * w / |w|^2 at the boundary at the probe's location (w: the
validation-selected ridge probe of --probes, fitted on the capture --acts, in native coordinates, so the
probe's read-out moves by exactly delta), for a grid of delta, on the capture's own prompts with its own
model; a random direction of the same norm is the control. Writes steering.json, steering.csv and
fig9b_steering.png/.pdf.
"""


def _register_behaviour(sub) -> None:
    from countlens.llm.experiments.patching import PatchingConfig
    from countlens.llm.experiments.steering import SteeringConfig

    pd, sd = PatchingConfig(), SteeringConfig()
    pa = sub.add_parser("patch", help="Figure 9a: patch the boundary vector of one count into another's prompt",
                        description=PATCH_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(pa, PATCH_COMMAND, pd, helps={
        "per_count": "prompt pairs per (count pair, token pair, configuration, seed)",
        "locations": "locations to patch: indices, ranges like 0:6, names, or all"})
    pa.add_argument("--out", required=True, help="output folder")
    pa.add_argument("--sources", default=_ints_text(pd.sources), help="source counts n_s, one per target")
    pa.add_argument("--targets", default=_ints_text(pd.targets), help="target counts n_t (the prompts that are patched)")
    pa.add_argument("--quiet", action="store_true", help="no model-loading messages")
    pa.set_defaults(func=cmd_patch)

    st = sub.add_parser("steer", help="Figure 9b: steer the boundary vector along the probe, with a random control",
                        description=STEER_DESCRIPTION, formatter_class=HelpFormatter)
    st.add_argument("--acts", required=True, help="the capture folder the probes were fitted on")
    st.add_argument("--probes", required=True, help="probes.json written by `countlens probe --acts` on that capture")
    st.add_argument("--out", required=True, help="output folder")
    st.add_argument("--location", default=None, help="the probe location to steer at (default: the probes' best)")
    st.add_argument("--deltas", default=",".join(f"{d:g}" for d in sd.deltas),
                    help="steps delta of the probe's read-out, finite numbers")
    st.add_argument("--counts", default=_ints_text(sd.counts), help="counts of the prompts to steer")
    st.add_argument("--max-prompts", dest="max_prompts", type=int, default=sd.max_prompts,
                    help="most prompts steered (spread over --counts)")
    st.add_argument("--seed", type=int, default=sd.seed, help="seed of the random control direction")
    add_capture_options(st, STEER_COMMAND, sd)
    st.add_argument("--quiet", action="store_true", help="no model-loading messages")
    st.set_defaults(func=cmd_steer)


def cmd_patch(args) -> int:
    from countlens.llm.experiments.patching import PatchingConfig, run_patching
    from countlens.llm.figures import draw_patching
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = PatchingConfig().with_options(**capture_options(args, PATCH_COMMAND),
                                           sources=parse_int_list(args.sources, "--sources"),
                                           targets=parse_int_list(args.targets, "--targets")).validate()
    result = run_patching(config, progress=not args.quiet)
    result.save(args.out)
    draw_patching(result, args.out)
    best = max(result.locations, key=lambda loc: loc["moved_to_source"])
    print(f"patched {len(result.rows)} prompts at {len(result.locations)} locations; clean accuracy "
          f"{result.clean_accuracy:.2f}; most answers moved to the source at {best['label']} "
          f"({best['moved_to_source']:.2f}) -> {args.out}")
    return 0


def cmd_steer(args) -> int:
    from countlens.llm.experiments.steering import SteeringConfig, run_steering
    from countlens.llm.figures import draw_steering
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = SteeringConfig(acts=args.acts, probes=args.probes, location=args.location,
                            deltas=parse_float_list(args.deltas, "--deltas"), counts=parse_counts(args.counts),
                            max_prompts=args.max_prompts, seed=args.seed)
    config = config.with_options(**capture_options(args, STEER_COMMAND)).validate()
    result = run_steering(config, progress=not args.quiet)
    result.save(args.out)
    draw_steering(result, args.out)
    probe = result.curves["probe"]
    print(f"steered {len(probe) and len(result.rows) // (2 * len(probe))} prompts along the probe at "
          f"{result.location} for {len(probe)} steps -> {args.out}")
    return 0
