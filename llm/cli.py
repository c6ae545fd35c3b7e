"""``countlens llm capture``, ``llm prompts`` and ``llm pairs``: parse, build a config, run, write."""

from __future__ import annotations

import argparse

from countlens.core.args import HelpFormatter, parse_int_list, reword
from countlens.core.errors import UsageError

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


def _add_model_args(p: argparse.ArgumentParser, defaults) -> None:
    p.add_argument("--model", default=defaults.model,
                   help="hub id (org/name), model folder, .gguf file, or 'default' (the embedded "
                        "SmolLM2-135M-Instruct)")
    p.add_argument("--gguf-file", default=defaults.gguf_file,
                   help="GGUF file inside --model's folder or hub repo, or a path to one")
    p.add_argument("--revision", default=defaults.revision,
                   help="hub branch, tag or commit of --model (offline: must be in the Hugging Face cache; "
                        "default: main)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the model repo's own Python code (needed by some architectures; recorded)")


def _add_prompt_args(p: argparse.ArgumentParser, defaults) -> None:
    _add_model_args(p, defaults)
    p.add_argument("--L", type=int, default=defaults.L, help="maximum number of items n + m")
    p.add_argument("--counts", default=_ints_text(defaults.counts),
                   help="counts n: a range 0:100, a list 1,2,3 or both 0:10,90:100 (inclusive)")
    p.add_argument("--per-count", type=int, default=defaults.per_count,
                   help="prompts per (count, pair, configuration, seed)")
    p.add_argument("--pairs", default=",".join("/".join(p) for p in defaults.pairs),
                   help="target/distractor pairs, each item one token (see `countlens llm pairs`)")
    p.add_argument("--configs", default=",".join(defaults.configs), help="instruction wordings")
    p.add_argument("--seeds", default=_ints_text(defaults.seeds), help="prompt seeds")
    p.add_argument("--template", choices=("chat", "plain"), default=defaults.template,
                   help="chat: the model's chat template; plain: '<instruction>\\nAnswer:' for models without one")


def register(subparsers) -> None:
    from countlens.llm.experiments import CaptureConfig
    from countlens.llm.prompts import CANDIDATE_PAIRS

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
    _add_prompt_args(cap, defaults)
    cap.add_argument("--out", required=True, help="output folder (resumes an interrupted run with the same settings)")
    cap.add_argument("--batch-size", type=int, default=defaults.batch_size, help="prompts per forward pass")
    cap.add_argument("--backend", choices=("hf", "transformer-lens"), default=defaults.backend,
                     help="hf: forward hooks; transformer-lens: TransformerBridge (adds hook_resid_mid)")
    cap.add_argument("--locations", default="all",
                     help="locations to keep: names, indices (0 = embed, l = output of block l-1, -1 = last), "
                          "ranges like 0:6, or all; the forward pass stops after the last one")
    cap.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:N, mps, or auto (accelerate device map)")
    cap.add_argument("--dtype", default=defaults.dtype, choices=("float32", "float16", "bfloat16"),
                     help="model compute dtype")
    cap.add_argument("--acts-dtype", default=defaults.acts_dtype, choices=("float32", "float16"),
                     help="stored activation dtype")
    cap.add_argument("--padding-side", default=defaults.padding_side, choices=("left", "right"),
                     help="batch padding side (results agree to float rounding)")
    cap.add_argument("--shard-rows", type=int, default=defaults.shard_rows,
                     help="prompts per shard on disk, the unit an interrupted run resumes from")
    cap.add_argument("--ray", nargs="?", const="auto", default=None, metavar="auto|ADDRESS|local:N",
                     help="spread the shards over a Ray cluster, one worker per GPU or CPU slot: auto (the "
                          "cluster this machine joined), a cluster address, or local:N (N slots here); "
                          "--out must be on storage every node sees (default: no Ray, one process)")
    cap.add_argument("--answers", action="store_true",
                     help="also record the model's own greedy answer to every prompt (columns answer_text, "
                          "answer, answer_logprob), decoded from the capture's own prompt pass: a few decode "
                          "steps per prompt, not a second pass (so this is a capture option, not a command over "
                          "an existing capture); runs the whole model, left-padded")
    cap.add_argument("--answer-tokens", type=int, default=defaults.answer_tokens,
                     help="most new tokens per answer (small chat models write a short sentence first)")
    cap.add_argument("--random-init", action="store_true",
                     help="capture a model of the same architecture and tokenizer with freshly initialised "
                          "weights (a probe baseline; seeded by --init-seed)")
    cap.add_argument("--init-seed", type=int, default=defaults.init_seed, help=f"seed of --random-init's weights (default: {defaults.init_seed})")
    cap.add_argument("--quiet", action="store_true", help="no progress bar")
    cap.set_defaults(func=cmd_capture)

    _register_behaviour(sub)

    pr = sub.add_parser("prompts", help="print a few rendered prompts with the boundary token marked ⟦...⟧",
                        description="Print a few rendered prompts exactly as the model reads them, the boundary "
                                    "token marked ⟦...⟧.\nLoads only the tokenizer and the model's config.",
                        formatter_class=HelpFormatter)
    _add_prompt_args(pr, defaults)
    pr.add_argument("--show", type=int, default=3, help="how many prompts to print")
    pr.set_defaults(func=cmd_prompts)

    pa = sub.add_parser("pairs", help="list the target/distractor pairs whose items are one token each",
                        description="List the candidate pairs whose items are each one token of their own in "
                                    "every chosen wording, for a model.\nLoads only the tokenizer.",
                        formatter_class=HelpFormatter)
    _add_model_args(pa, defaults)
    pa.add_argument("--candidates", default=",".join("/".join(p) for p in CANDIDATE_PAIRS),
                    help="target/distractor pairs to try")
    pa.add_argument("--configs", default=",".join(defaults.configs), help="instruction wordings to check in")
    pa.add_argument("--template", choices=("chat", "plain"), default=defaults.template,
                    help="chat: the model's chat template; plain: '<instruction>\\nAnswer:'")
    pa.set_defaults(func=cmd_pairs)


def _config(args, **extra):
    from countlens.llm.experiments import CaptureConfig
    from countlens.llm.prompts import parse_pairs

    return CaptureConfig(model=args.model, gguf_file=args.gguf_file, revision=args.revision,
                         trust_remote_code=args.trust_remote_code, L=args.L, counts=parse_counts(args.counts),
                         per_count=args.per_count, pairs=parse_pairs(args.pairs),
                         configs=[c.strip() for c in args.configs.split(",") if c.strip()],
                         seeds=parse_int_list(args.seeds, "--seeds"), template=args.template, **extra).validate()


def _on_command_line(exc: UsageError) -> UsageError:
    from countlens.llm.experiments import FLAGS

    return reword(exc, FLAGS)


def cmd_capture(args) -> int:
    from countlens.llm.experiments import run_capture
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    try:
        config = _config(args, locations=args.locations, batch_size=args.batch_size, backend=args.backend,
                         device=args.device, dtype=args.dtype, acts_dtype=args.acts_dtype,
                         padding_side=args.padding_side, shard_rows=args.shard_rows, answers=args.answers,
                         answer_tokens=args.answer_tokens, random_init=args.random_init,
                         init_seed=args.init_seed)
        if args.ray is None:
            result = run_capture(config, args.out, progress=not args.quiet)
        else:
            from countlens.llm.distributed import run_capture_on_ray

            result = run_capture_on_ray(config, args.out, args.ray, progress=not args.quiet)
    except UsageError as exc:
        raise reword(_on_command_line(exc), {"ray target": "--ray"}) from None
    meta = result.meta
    print(f"captured {meta['n_prompts']} prompts x {len(meta['locations'])} locations x {meta['d']} dims "
          f"-> {result.folder}")
    return 0


def cmd_prompts(args) -> int:
    from countlens.llm.experiments import plan_capture
    from countlens.llm.models import quiet_transformers
    from countlens.llm.prompts import mark_boundary

    if args.show < 1:
        raise UsageError(f"--show must be >= 1, got {args.show}")
    quiet_transformers()
    try:
        plan = plan_capture(_config(args))
    except UsageError as exc:
        raise _on_command_line(exc) from None
    prompts = sorted(plan.prompts, key=lambda p: p.n)
    step = max(1, len(prompts) // args.show)
    for p in prompts[::step][:args.show]:
        print(f"--- n={p.n} m={p.m} pair={p.pair} config={p.config} seed={p.seed} tokens={p.n_tokens} "
              f"boundary_index={p.boundary_index} items={p.first_item_index}..{p.last_item_index}")
        print(mark_boundary(plan.tokenizer, p))
    print(f"--- {len(prompts)} prompts in all; the boundary token is marked ⟦...⟧")
    return 0


def cmd_pairs(args) -> int:
    from countlens.llm.experiments import CaptureConfig, find_pairs
    from countlens.llm.models import quiet_transformers
    from countlens.llm.prompts import parse_pairs

    quiet_transformers()
    try:
        candidates = parse_pairs(args.candidates)
        config = CaptureConfig(model=args.model, gguf_file=args.gguf_file, revision=args.revision,
                               trust_remote_code=args.trust_remote_code,
                               configs=[c.strip() for c in args.configs.split(",") if c.strip()],
                               template=args.template)
        found = find_pairs(config, candidates)
    except UsageError as exc:
        raise reword(_on_command_line(exc), {"--pairs": "--candidates"}) from None
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
    from countlens.llm.experiments import PatchingConfig, SteeringConfig

    pd, sd = PatchingConfig(), SteeringConfig()
    pa = sub.add_parser("patch", help="Figure 9a: patch the boundary vector of one count into another's prompt",
                        description=PATCH_DESCRIPTION, formatter_class=HelpFormatter)
    _add_model_args(pa, pd)
    pa.add_argument("--out", required=True, help="output folder")
    pa.add_argument("--sources", default=",".join(str(c) for c in pd.sources),
                    help="source counts n_s, one per target")
    pa.add_argument("--targets", default=",".join(str(c) for c in pd.targets),
                    help="target counts n_t (the prompts that are patched)")
    pa.add_argument("--L", type=int, default=pd.L, help="maximum number of items n + m")
    pa.add_argument("--per-count", type=int, default=pd.per_count, help="prompt pairs per (count pair, token "
                    "pair, configuration, seed)")
    pa.add_argument("--pairs", default=",".join("/".join(p) for p in pd.pairs), help="target/distractor token pairs")
    pa.add_argument("--configs", default=",".join(pd.configs), help="instruction wordings")
    pa.add_argument("--seeds", default=",".join(str(s) for s in pd.seeds), help="prompt seeds")
    pa.add_argument("--template", choices=("chat", "plain"), default=pd.template,
                    help="chat: the model's chat template; plain: '<instruction>\\nAnswer:'")
    pa.add_argument("--locations", default="all", help="locations to patch: indices, ranges like 0:6, names, or all")
    _add_decoding_args(pa, pd)
    pa.add_argument("--dtype", default=pd.dtype, choices=("float32", "float16", "bfloat16"), help="model compute dtype")
    pa.set_defaults(func=cmd_patch)

    st = sub.add_parser("steer", help="Figure 9b: steer the boundary vector along the probe, with a random control",
                        description=STEER_DESCRIPTION, formatter_class=HelpFormatter)
    st.add_argument("--acts", required=True, help="the capture folder the probes were fitted on")
    st.add_argument("--probes", required=True, help="probes.json written by `countlens probe --acts` on that capture")
    st.add_argument("--out", required=True, help="output folder")
    st.add_argument("--location", default=None, help="the probe location to steer at (default: the probes' best)")
    st.add_argument("--deltas", default=",".join(f"{d:g}" for d in sd.deltas),
                    help="steps delta of the probe's read-out, finite numbers")
    st.add_argument("--counts", default=",".join(str(c) for c in sd.counts), help="counts of the prompts to steer")
    st.add_argument("--max-prompts", type=int, default=sd.max_prompts, help="most prompts steered (spread over --counts)")
    st.add_argument("--seed", type=int, default=sd.seed, help=f"seed of the random control direction (default: {sd.seed})")
    _add_decoding_args(st, sd)
    st.set_defaults(func=cmd_steer)


def _add_decoding_args(p: argparse.ArgumentParser, defaults) -> None:
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="prompts per forward pass")
    p.add_argument("--answer-tokens", type=int, default=defaults.max_new_tokens, help="most new tokens per answer")
    p.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:N, mps, or auto")
    p.add_argument("--quiet", action="store_true", help="no model-loading messages")


BEHAVIOUR_FLAGS = {"sources": "--sources", "targets": "--targets", "deltas": "--deltas", "counts": "--counts",
                   "max_prompts": "--max-prompts", "batch_size": "--batch-size", "max_new_tokens": "--answer-tokens"}


def cmd_patch(args) -> int:
    from countlens.core.args import parse_int_list
    from countlens.llm.experiments import PatchingConfig, run_patching
    from countlens.llm.figures import draw_patching
    from countlens.llm.models import quiet_transformers
    from countlens.llm.prompts import parse_pairs

    quiet_transformers()
    try:
        config = PatchingConfig(
            model=args.model, gguf_file=args.gguf_file, revision=args.revision,
            trust_remote_code=args.trust_remote_code, L=args.L, sources=parse_int_list(args.sources, "--sources"),
            targets=parse_int_list(args.targets, "--targets"), per_count=args.per_count,
            pairs=parse_pairs(args.pairs), configs=[c.strip() for c in args.configs.split(",") if c.strip()],
            seeds=parse_int_list(args.seeds, "--seeds"), template=args.template, locations=args.locations,
            batch_size=args.batch_size, max_new_tokens=args.answer_tokens, device=args.device,
            dtype=args.dtype).validate()
        result = run_patching(config, progress=not args.quiet)
    except UsageError as exc:
        raise reword(_on_command_line(exc), BEHAVIOUR_FLAGS) from None
    from pathlib import Path

    result.save(Path(args.out) / "patching.json")
    draw_patching(result, args.out)
    best = max(result.locations, key=lambda loc: loc["moved_to_source"])
    print(f"patched {len(result.rows)} prompts at {len(result.locations)} locations; clean accuracy "
          f"{result.clean_accuracy:.2f}; most answers moved to the source at {best['label']} "
          f"({best['moved_to_source']:.2f}) -> {args.out}")
    return 0


def cmd_steer(args) -> int:
    from pathlib import Path

    from countlens.core.args import parse_float_list
    from countlens.llm.experiments import SteeringConfig, run_steering
    from countlens.llm.figures import draw_steering
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    try:
        config = SteeringConfig(acts=args.acts, probes=args.probes, location=args.location,
                                deltas=parse_float_list(args.deltas, "--deltas"),
                                counts=parse_counts(args.counts), max_prompts=args.max_prompts, seed=args.seed,
                                batch_size=args.batch_size, max_new_tokens=args.answer_tokens,
                                device=args.device).validate()
        result = run_steering(config, progress=not args.quiet)
    except UsageError as exc:
        raise reword(_on_command_line(exc), BEHAVIOUR_FLAGS) from None
    result.save(Path(args.out) / "steering.json")
    draw_steering(result, args.out)
    probe = result.curves["probe"]
    print(f"steered {len(probe) and len(result.rows) // (2 * len(probe))} prompts along the probe at "
          f"{result.location} for {len(probe)} steps -> {args.out}")
    return 0
