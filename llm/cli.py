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
from countlens.core.options import option_value
from countlens.llm.capture.experiment import ACTS_DTYPES, PADDING_SIDES, CaptureConfig
from countlens.llm.capture.residuals import BACKENDS, POSITIONS
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
                                              "l-1, -1 = last), ranges like 0:6 or with a step 0:-1:4, or all; the "
                                              "forward pass stops after the last one", text=lambda v: "all" if v is None else v),
    CaptureOption("--batch-size", "batch_size", "prompts per forward pass", type=int),
    CaptureOption("--backend", "backend", "hf: forward hooks; transformer-lens: TransformerBridge (adds "
                                          "hook_resid_mid)", choices=BACKENDS),
    CaptureOption("--acts-dtype", "acts_dtype", "stored activation dtype", choices=ACTS_DTYPES),
    CaptureOption("--padding-side", "padding_side", "batch padding side (results agree to float rounding)",
                  choices=PADDING_SIDES),
    CaptureOption("--shard-rows", "shard_rows", "prompts per shard on disk, the unit an interrupted run resumes "
                                                "from (an items capture's shard holds all its prompts' rows)",
                  type=int),
    CaptureOption("--positions", "positions", "boundary: one row per prompt; items: also the residual at every "
                                              "item token, from the same forward pass (one row per prompt and "
                                              "position, columns prompt_id, position, item_index, is_target, "
                                              "running_count; prints its size on disk first)", choices=POSITIONS),
    CaptureOption("--answers", "answers", "also record the model's own greedy answer to every prompt (columns "
                                          "answer_text, answer, answer_logprob), decoded from the capture's own "
                                          "prompt pass: a few decode steps per prompt, not a second pass (so this "
                                          "is a capture option, not a command over an existing capture), and "
                                          "the answer as a distribution over the counts min..max of --counts "
                                          "(answer_logprobs, answer_expected, answer_rank), every candidate "
                                          "teacher-forced from the same pass; runs the whole model, left-padded",
                  switch=True),
    CaptureOption("--answer-tokens", "answer_tokens", "most new tokens per answer (small chat models write a short "
                                                      "sentence first)", type=int),
    CaptureOption("--random-init", "random_init", "capture a model of the same architecture and tokenizer with "
                                                  "freshly initialised weights (a probe baseline; seeded by "
                                                  "--init-seed)", switch=True),
    CaptureOption("--init-seed", "init_seed", "seed of --random-init's weights", type=int),
    CaptureOption("--no-cache", "no_cache", "convert a GGUF model afresh: neither read nor write the converted "
                                            "tokenizer and float32 weights cached under $COUNTLENS_CACHE (default "
                                            "$XDG_CACHE_HOME/countlens or ~/.cache/countlens)", switch=True),
)}

MODEL_OPTIONS = ("model", "gguf_file", "revision", "trust_remote_code", "no_cache")
PROMPT_OPTIONS = (*MODEL_OPTIONS, "L", "counts", "per_count", "pairs", "configs", "seeds", "template")
CAPTURE_COMMAND = (*PROMPT_OPTIONS, "locations", "batch_size", "backend", "device", "dtype", "acts_dtype",
                   "padding_side", "shard_rows", "positions", "answers", "answer_tokens", "random_init", "init_seed")
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
    _register_heads(sub)


HEADS_COMMAND = (*MODEL_OPTIONS, "L", "counts", "per_count", "pairs", "configs", "seeds", "template", "batch_size",
                 "device", "dtype")
HEADS_DESCRIPTION = """\
Figure 12: the heads that read the items. Per block and head, the attention mass from the boundary and from
the last item to the target items, the distractor items and everything else (mean and spread over the
prompts; the model's own eager attention weights) and the target excess (the targets' share of the head's item
attention minus their share of the items). Head ablation replaces a head's output at the boundary (its slice of
the attention output projection's input) by its mean over the prompts' boundaries and scores
LD = log p("n") - log p("n - 1") (each answer teacher-forced over all its tokens) against the prompt's twin
with one target turned into the distractor: normalised_ld = (LD_ablated - LD_twin) / (LD_clean - LD_twin) is 1
where the ablation changes nothing and 0 where it changes as much as removing a target; with --probes, also
the shift of the probe's read-out. Architectures whose attention output projection the hook-site registry
does not know are refused before the weights load. Writes heads.json, heads.csv, heads_prompts.csv and
fig12_heads.png/.pdf.
"""


def _register_heads(sub) -> None:
    from countlens.llm.heads.experiment import HeadsConfig
    from countlens.llm.positions.experiment import FLIPS

    hd = HeadsConfig()
    he = sub.add_parser("heads", help="Figure 12: attention mass of every head to the items, and head ablation",
                        description=HEADS_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(he, HEADS_COMMAND, hd, helps={
        "counts": "counts n of the prompts (ablation needs n >= 1): a range 1:12, a list 1,2,3 or both",
        "batch_size": "prompts per forward pass (an ablation step runs all heads of a block for them)"})
    he.add_argument("--layers", default=None, help="blocks whose heads are ablated: 0-based indices, -1, ranges "
                                                   "like 0:5, or all (default: all)")
    he.add_argument("--ablate-prompts", dest="ablate_prompts", type=int, default=hd.ablate_prompts,
                    help="most prompts ablated, spread over the prompt set (0: attention masses only)")
    he.add_argument("--flip", choices=FLIPS, default=hd.flip,
                    help="which target the twin turns into the distractor")
    he.add_argument("--probes", default=None, help="probes.json fitted on a capture of the same model: its "
                                                   "read-out is scored too (default: none)")
    he.add_argument("--location", default=None, help="the probe location to read (default: the probes' best)")
    he.add_argument("--out", required=True, help="output folder")
    he.add_argument("--quiet", action="store_true", help="no model-loading messages")
    he.set_defaults(func=cmd_heads)


def cmd_heads(args) -> int:
    from countlens.llm.heads.experiment import HeadsConfig, run_heads
    from countlens.llm.heads.figures import draw_heads
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = HeadsConfig().with_options(**capture_options(args, HEADS_COMMAND), layers=args.layers,
                                        ablate_prompts=args.ablate_prompts, flip=args.flip, probes=args.probes,
                                        location=args.location).validate()
    result = run_heads(config, progress=not args.quiet)
    result.save(args.out)
    draw_heads(result, args.out)
    looked = result.heads[result.ranked("boundary_target_excess_mean", 1)[0]] if result.ranked(
        "boundary_target_excess_mean", 1) else None
    text = (f"; from the boundary, L{looked['layer']}H{looked['head']} prefers the targets most (excess "
            f"{looked['boundary_target_excess_mean']:.3f})" if looked else "")
    top = result.ranked("effect_mean", 1) or result.ranked("ld_change_mean", 1, sign=-1.0)
    if result.layers and top:
        h = result.heads[top[0]]
        text += f"; ablating L{h['layer']}H{h['head']} moves the answer most"
    print(f"heads: {result.n_layers} blocks x {result.n_heads} heads on {len(result.prompts)} prompts, "
          f"{sum(p['ablated'] for p in result.prompts)} ablated in {len(result.layers)} blocks{text} -> {args.out}")
    return 0


def cmd_capture(args) -> int:
    from countlens.llm.capture.experiment import run_capture
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = CaptureConfig().with_options(**capture_options(args, CAPTURE_COMMAND)).validate()
    if args.ray is None:
        result = run_capture(config, args.out, progress=not args.quiet, notify=print)
    else:
        from countlens.llm.capture.distributed import run_capture_on_ray

        result = run_capture_on_ray(config, args.out, args.ray, progress=not args.quiet, notify=print)
    meta = result.meta
    rows = f" ({result.n_rows} rows: every item and the boundary)" if meta.get("positions") == "items" else ""
    print(f"captured {meta['n_prompts']} prompts{rows} x {len(meta['locations'])} locations x {meta['d']} dims "
          f"-> {result.folder}")
    return 0


def cmd_prompts(args) -> int:
    from countlens.llm.capture.experiment import plan_capture
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
    from countlens.llm.capture.experiment import find_pairs
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
Figure 9a (--positions boundary, the default): boundary activation patching. For prompt pairs that differ
only in count (same seed, wording, token pair and draw), the target prompt's boundary vector at location l is
replaced by the source prompt's, the forward continues, and the model's greedy answer is recorded: per
location, the fraction of answers that move to the source count, the mean shift of the parsed answer and the
change of the correct answer's log-probability; and, with every candidate answer teacher-forced (all its
tokens, no end-of-turn token), normalised_ld = (LD_patched - LD_target) / (LD_source - LD_target) with
LD = log p("n_s") - log p("n_t"), and the shift of the expected count sum_k k p(k). Only the boundary position
is patched, so later blocks can still re-read the items: the curve shows where the count is committed. Writes
patching.json, patching.csv and fig9a_patching.png/.pdf.

Figure 11 (--positions all or items): patching over positions and layers. Each clean prompt (--counts, n >= 1
targets) has a corrupted twin with one target (--flip first|middle|last) turned into the distractor (n - 1
targets, the same tokens elsewhere); the clean residual at (location l, position p) replaces the corrupted
run's, for every location and every position from the first item to the boundary (all) or the items and the
boundary (items), scored by normalised_ld = (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt) with
LD = log p("n") - log p("n - 1"). Pairs whose clean and corrupted LD differ by less than --min-gap nats are
listed, not normalised. Writes position_patching.json, position_patching.csv and
fig11_position_patching.png/.pdf.
"""

STEER_DESCRIPTION = """\
Figure 9b: steering at the boundary. Adds a step at the boundary at one location (default: the best location
of --probes) along each --direction, and along a random direction of the same norm (the control), for a grid
of delta, on the capture's own prompts with its own model; records the greedy answer, the expected count over
the capture's count range and log p(n + delta) (every candidate answer teacher-forced), and the step's share
of the boundary vector's norm.
  --units readout (the default, the probe's read-out units): delta * w / |w|^2 along the validation-selected
    ridge probe w of --probes (fitted on --acts, native coordinates): the probe reads exactly delta more. Where
    |w| is large (SmolLM2-135M: ~2,900 after block 1) these steps are tiny.
  --units count: every direction u (probe, mean-diff, random) scaled to delta * |v| * u / |u|, v the
    mean-difference direction (the least-squares slope of the capture's count centroids on n): a step of
    delta moves the vector as far as delta more items do on average.
Writes steering.json, steering.csv and fig9b_steering.png/.pdf.
"""


def _register_behaviour(sub) -> None:
    from countlens.llm.patching.edits import PATCH_METHODS
    from countlens.llm.patching.experiment import PatchingConfig
    from countlens.llm.positions.experiment import FLIPS, POSITION_SETS, PositionPatchingConfig
    from countlens.llm.steering.experiment import UNITS, SteeringConfig

    pd, sd, xd = PatchingConfig(), SteeringConfig(), PositionPatchingConfig()
    pa = sub.add_parser("patch", help="Figures 9a and 11: patch the boundary vector of one count into another's "
                                      "prompt, or every position and layer of a prompt into its corrupted twin",
                        description=PATCH_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(pa, PATCH_COMMAND, pd, helps={
        "per_count": "prompt pairs per (count pair, token pair, configuration, seed); with --positions all: "
                     "clean prompts per count",
        "locations": "locations to patch: indices, ranges like 0:6, names, or all",
        "answer_tokens": "most new tokens per greedy answer (--positions boundary)"})
    pa.add_argument("--out", required=True, help="output folder")
    pa.add_argument("--positions", dest="positions", choices=("boundary", *POSITION_SETS), default="boundary",
                    help="boundary: Figure 9a, the boundary vector of a source prompt patched into a target prompt; "
                         "all: Figure 11, every position from the first item to the boundary patched into the "
                         "corrupted twin; items: the items and the boundary only")
    pa.add_argument("--sources", default=None, help=f"source counts n_s, one per target (--positions boundary; "
                                                    f"default: {_ints_text(pd.sources)})")
    pa.add_argument("--targets", default=None, help=f"target counts n_t, the prompts that are patched (--positions "
                                                    f"boundary; default: {_ints_text(pd.targets)})")
    pa.add_argument("--counts", dest="counts", default=None,
                    help=f"counts n >= 1 of the clean prompts (--positions all|items): a range 1:6, a list 3,6 or "
                         f"both (default: {_ints_text(xd.prompts.counts)})")
    pa.add_argument("--flip", dest="flip", choices=FLIPS, default=None,
                    help=f"which target the corrupted twin turns into the distractor (--positions all|items; "
                         f"default: {xd.flip})")
    pa.add_argument("--location-step", dest="location_step", type=int, default=None,
                    help="patch every k-th of --locations, the last always (--positions all|items; default: "
                         f"{xd.location_step})")
    pa.add_argument("--method", dest="method", choices=PATCH_METHODS, default=None,
                    help="cached: reuse the corrupted run's key/value cache and residuals (fast); naive: one whole "
                         f"forward per position and location (the reference; same scores) (default: {xd.method})")
    pa.add_argument("--min-gap", dest="min_gap", type=float, default=None,
                    help="pairs whose two unpatched logit differences differ by less than this many nats are listed, "
                         f"not normalised (default: {pd.min_gap:g})")
    pa.add_argument("--quiet", action="store_true", help="no model-loading messages")
    pa.set_defaults(func=cmd_patch)

    st = sub.add_parser("steer", help="Figure 9b: steer the boundary vector along the probe or the mean difference, with a random control",
                        description=STEER_DESCRIPTION, formatter_class=HelpFormatter)
    st.add_argument("--acts", required=True, help="the capture to steer: its model and prompts, the capture the "
                                                  "probes were fitted on and, in count units, the one v is fitted on")
    st.add_argument("--probes", default=sd.probes, help="probes.json written by `countlens probe --acts` on that "
                                                        "capture (needed by --direction probe) (default: none)")
    st.add_argument("--out", required=True, help="output folder")
    st.add_argument("--location", default=None, help="the location to steer at: a name or index of the capture's "
                                                     "locations (default: the probes' best)")
    st.add_argument("--direction", dest="directions", default=",".join(sd.directions),
                    help="directions to steer along, comma-separated: probe (the ridge probe), mean-diff (the "
                         "slope of the count centroids on n; needs --units count); a random control is always added")
    st.add_argument("--units", choices=UNITS, default=sd.units,
                    help="readout: delta * w / |w|^2 (the probe reads delta more); count: delta * |v| along each "
                         "direction (as far as delta more items)")
    st.add_argument("--deltas", default=",".join(f"{d:g}" for d in sd.deltas),
                    help="steps delta, finite numbers, in --units")
    st.add_argument("--counts", default=_ints_text(sd.counts), help="counts of the prompts to steer")
    st.add_argument("--max-prompts", dest="max_prompts", type=int, default=sd.max_prompts,
                    help="most prompts steered (spread over --counts)")
    st.add_argument("--seed", type=int, default=sd.seed, help="seed of the random control direction")
    add_capture_options(st, STEER_COMMAND, sd)
    st.add_argument("--quiet", action="store_true", help="no model-loading messages")
    st.set_defaults(func=cmd_steer)
    _register_lens(sub)


def _given(args, *names: str) -> list[str]:
    return [name for name in names if getattr(args, name, None) is not None]


def cmd_patch(args) -> int:
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    if args.positions != "boundary":
        return _patch_positions(args)
    from countlens.llm.patching.experiment import PatchingConfig, run_patching
    from countlens.llm.patching.figures import draw_patching

    wrong = _given(args, "counts", "flip", "method", "location_step")
    if wrong:
        raise ConfigError(wrong[0], f"{{{wrong[0]}}} is for {{positions:all}} (Figure 11); boundary patching "
                                    "takes {sources} and {targets}", also=("positions", "sources", "targets"))
    defaults = PatchingConfig()
    config = PatchingConfig().with_options(
        **capture_options(args, PATCH_COMMAND), **({"min_gap": args.min_gap} if args.min_gap is not None else {}),
        sources=parse_int_list(args.sources, "--sources") if args.sources is not None else defaults.sources,
        targets=parse_int_list(args.targets, "--targets") if args.targets is not None else defaults.targets
    ).validate()
    result = run_patching(config, progress=not args.quiet)
    result.save(args.out)
    draw_patching(result, args.out)
    best = max(result.locations, key=lambda loc: loc["moved_to_source"])
    scored = [loc for loc in result.locations if loc["normalised_ld"] is not None]
    moved = max(scored, key=lambda loc: loc["normalised_ld"]) if scored else None
    text = (f"; the logit difference moves most to the source at {moved['label']} (normalised "
            f"{moved['normalised_ld']:.2f})" if moved else "; no pair's logit differences could be normalised")
    print(f"patched {len(result.rows)} prompts at {len(result.locations)} locations; clean accuracy "
          f"{result.clean_accuracy:.2f}; most answers moved to the source at {best['label']} "
          f"({best['moved_to_source']:.2f}){text} -> {args.out}")
    return 0


def _patch_positions(args) -> int:
    from countlens.llm.positions.experiment import PositionPatchingConfig, run_position_patching
    from countlens.llm.positions.figures import draw_position_patching

    wrong = _given(args, "sources", "targets")
    if wrong:
        raise ConfigError(wrong[0], f"{{{wrong[0]}}} is for {{positions:boundary}} (Figure 9a); patching over "
                                    "positions takes {counts}", also=("positions", "counts"))
    names = [n for n in PATCH_COMMAND if n != "answer_tokens"]
    values = {n: getattr(args, n) for n in ("flip", "method", "min_gap", "location_step")
              if getattr(args, n) is not None}
    if args.counts is not None:
        values["counts"] = parse_counts(args.counts)
    config = PositionPatchingConfig().with_options(**capture_options(args, names), positions=args.positions,
                                                   **values).validate()
    result = run_position_patching(config, progress=not args.quiet)
    result.save(args.out)
    draw_position_patching(result, args.out)
    half = result.boundary_half
    text = f"; the boundary first carries half the flipped item's effect {half['label']}" if half else ""
    print(f"patched {len(result.pairs)} prompt pairs at {len(result.locations)} locations x their positions "
          f"({result.cells} cells, {result.runs} patched runs); {result.n_unnormalised} pairs too close to "
          f"normalise{text} -> {args.out}")
    return 0


def cmd_steer(args) -> int:
    from countlens.llm.models import quiet_transformers
    from countlens.llm.steering.experiment import SteeringConfig, run_steering
    from countlens.llm.steering.figures import draw_steering

    quiet_transformers()
    config = SteeringConfig(acts=args.acts, probes=args.probes, location=args.location,
                            deltas=parse_float_list(args.deltas, "--deltas"), counts=parse_counts(args.counts),
                            max_prompts=args.max_prompts, seed=args.seed, directions=_names(args.directions, ""),
                            units=args.units)
    config = config.with_options(**capture_options(args, STEER_COMMAND)).validate()
    result = run_steering(config, progress=not args.quiet)
    result.save(args.out)
    draw_steering(result, args.out)
    steps = len(config.deltas)
    along = ", ".join(d for d in result.curves if d != "random")
    widest = max((c["mean_relative_norm"] or 0.0) for curve in result.curves.values() for c in curve)
    print(f"steered {len(result.rows) // (len(result.curves) * steps)} prompts along {along} (and a random "
          f"control) at {result.location} for {steps} steps in {result.units} units; the largest step is "
          f"{widest:.3g} of the boundary vector's norm -> {args.out}")
    return 0


LENS_DESCRIPTION = """\
Figure 13: lenses at the boundary. Every location's boundary vector of the capture --acts is read as if it were
the last block's output: through the model's own final norm and unembedding (the logit lens; at the last
location it is the model's own next-token distribution), and through a tuned lens, an affine map to the last
location fitted by ridge on the training prompts (the probes' split rule), alpha chosen on the validation prompts
by the KL from the model's own answer-start distribution. Scored on the test prompts: the correct count's
first-token log-probability and its rank among the candidates' first tokens, and the expected count over the
single-token candidates. Also the angle between the count directions (the ridge probes of --probes, and the
mean-difference direction: the slope of the count centroids on n) and the number tokens' unembedding rows, raw
and through the final norm, against random directions. No prompt is run: the model is loaded for its head.
Writes lens.json, lens.csv, angles.csv and fig13_lens.png/.pdf.
"""


def _register_lens(sub) -> None:
    from countlens.llm.lens.experiment import LensConfig

    ld = LensConfig()
    le = sub.add_parser("lens", help="Figure 13: logit and tuned lenses at the boundary, count directions vs the "
                                     "unembedding", description=LENS_DESCRIPTION, formatter_class=HelpFormatter)
    le.add_argument("--acts", required=True, help="a capture folder made by `countlens llm capture` (its model is "
                                                  "recorded) with the last location")
    le.add_argument("--probes", default=None, help="probes.json fitted on that capture: its probes are compared "
                                                   "with the unembedding too (default: none)")
    le.add_argument("--out", required=True, help="output folder")
    le.add_argument("--locations", default=None, help="the capture's locations to read: names, indices, ranges "
                                                      "like 0:6, or all (default: all)")
    le.add_argument("--counts", default=None, help="candidate answers: a range 0:9, a list or both (default: the "
                                                   "capture's count range)")
    le.add_argument("--alphas", default=",".join(f"{a:g}" for a in ld.alphas),
                    help="the tuned lens's relative ridge penalties (multiples of the mean eigenvalue of the "
                         "standardised design), comma-separated")
    le.add_argument("--seed", type=int, default=ld.seed, help="split seed")
    le.add_argument("--split", dest="fractions", default=",".join(f"{f:g}" for f in ld.fractions),
                    help="train,validation,test fractions")
    le.add_argument("--baseline-directions", dest="baseline_directions", type=int, default=ld.baseline_directions,
                    help="random directions of the angle baseline")
    le.add_argument("--threads", type=int, default=ld.threads, help="torch and BLAS threads (extra threads mostly "
                                                                   "spin on these small matrices)")
    add_capture_options(le, ("device",), ld)
    le.add_argument("--quiet", action="store_true", help="no model-loading messages")
    le.set_defaults(func=cmd_lens)


def cmd_lens(args) -> int:
    from countlens.llm.lens.experiment import LensConfig, run_lens
    from countlens.llm.lens.figures import draw_lens
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = LensConfig(acts=args.acts, probes=args.probes, locations=args.locations,
                        counts=None if args.counts is None else parse_counts(args.counts),
                        alphas=parse_float_list(args.alphas, "--alphas"), seed=args.seed,
                        fractions=parse_float_list(args.fractions, "--split"),
                        baseline_directions=args.baseline_directions, device=args.device,
                        threads=args.threads).validate()
    result = run_lens(config, progress=not args.quiet)
    result.save(args.out)
    draw_lens(result, args.out)
    tuned = max(result.locations, key=lambda loc: -1e9 if loc["tuned"]["logprob"] is None else loc["tuned"]["logprob"])
    print(f"lenses at {len(result.locations)} locations on {result.split['n_test']} test prompts; the tuned lens "
          f"reads the correct first token best at {tuned['label']} (log p {tuned['tuned']['logprob']:.3f}; the "
          f"model's own {result.model_readout['logprob']:.3f}) -> {args.out}")
    return 0
