"""``countlens llm capture`` and ``countlens llm prompts``: parse, call, write."""

from __future__ import annotations

import argparse

from countlens.errors import UsageError


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


def _add_prompt_args(p: argparse.ArgumentParser) -> None:
    from countlens.llm.prompts import CONFIGURATIONS, DEFAULT_PAIRS

    p.add_argument("--model", default="default",
                   help="hub id, model folder, .gguf file, or 'default' (embedded SmolLM2-135M-Instruct)")
    p.add_argument("--gguf-file", default=None, help="GGUF file inside --model's folder/repo, or a path to one")
    p.add_argument("--L", type=int, default=256, help="maximum number of items n + m (default 256)")
    p.add_argument("--counts", default="0:100", help="counts n: 0:100, 1,2,3 or 0:10,90:100 (default 0:100)")
    p.add_argument("--per-count", type=int, default=1,
                   help="prompts per (count, pair, configuration, seed) (default 1)")
    p.add_argument("--pairs", default=",".join(f"{t}/{d}" for t, d in DEFAULT_PAIRS),
                   help="target/distractor token pairs (default %(default)s)")
    p.add_argument("--configs", default=",".join(CONFIGURATIONS),
                   help="instruction wordings (default %(default)s)")
    p.add_argument("--seeds", default="0,1,2", help="prompt seeds (default 0,1,2)")
    p.add_argument("--template", choices=("chat", "plain"), default="chat",
                   help="chat: the model's chat template; plain: '<instruction>\\nAnswer:' for models without one")


def _settings(args):
    from countlens.llm.prompts import PromptSettings, parse_pairs
    from countlens.args import parse_int_list

    return PromptSettings(L=args.L, counts=parse_counts(args.counts), per_count=args.per_count,
                          pairs=parse_pairs(args.pairs), configs=[c.strip() for c in args.configs.split(",") if c.strip()],
                          seeds=parse_int_list(args.seeds, "--seeds"), template=args.template).validate()


def register(subparsers) -> None:
    llm = subparsers.add_parser("llm", help="capture a chat model's boundary residual stream on counting prompts")
    sub = llm.add_subparsers(dest="llm_command", metavar="LLM_COMMAND", parser_class=type(llm))
    sub.required = True

    cap = sub.add_parser("capture", help="capture every layer's boundary vector for a counting prompt set")
    _add_prompt_args(cap)
    cap.add_argument("--out", required=True, help="output folder (resumes an interrupted run with the same settings)")
    cap.add_argument("--batch-size", type=int, default=16, help="prompts per forward pass (default 16)")
    cap.add_argument("--backend", choices=("hf", "transformer-lens"), default="hf",
                     help="hf: forward hooks; transformer-lens: TransformerBridge (adds hook_resid_mid)")
    cap.add_argument("--locations", default=None,
                     help="location indices to keep (0 = embed, l = output of block l-1), e.g. 0:6; "
                          "the forward pass stops after the last one (default all)")
    cap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps, or auto (accelerate device map)")
    cap.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                     help="model compute dtype (default float32)")
    cap.add_argument("--acts-dtype", default="float32", choices=("float32", "float16"),
                     help="stored activation dtype (default float32)")
    cap.add_argument("--padding-side", default="right", choices=("left", "right"),
                     help="batch padding side (results agree to float rounding; default right)")
    cap.add_argument("--shard-rows", type=int, default=256,
                     help="prompts per shard on disk, the unit an interrupted run resumes from (default 256)")
    cap.add_argument("--quiet", action="store_true", help="no progress bar")
    cap.set_defaults(func=run_capture)

    pr = sub.add_parser("prompts", help="print a few rendered prompts with the boundary token marked ⟦...⟧")
    _add_prompt_args(pr)
    pr.add_argument("--show", type=int, default=3, help="how many prompts to print (default 3)")
    pr.set_defaults(func=run_prompts)


def _quiet_transformers() -> None:
    """Loading bars and advisory warnings from transformers would bury our progress bar and errors."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def run_capture(args) -> int:
    from countlens.llm.capture import capture
    from countlens.store import read_meta

    _quiet_transformers()
    settings = _settings(args)
    locations = parse_counts(args.locations, "--locations") if args.locations else None
    out = capture(model=args.model, out_dir=args.out, L=settings.L, counts=settings.counts,
                  per_count=settings.per_count, pairs=settings.pairs, configs=settings.configs,
                  seeds=settings.seeds, template=settings.template, batch_size=args.batch_size,
                  backend=args.backend, locations=locations, gguf_file=args.gguf_file, device=args.device,
                  dtype=args.dtype, acts_dtype=args.acts_dtype, padding_side=args.padding_side,
                  shard_rows=args.shard_rows, progress=not args.quiet)
    meta = read_meta(out)
    print(f"captured {meta['n_prompts']} prompts x {len(meta['locations'])} locations x {meta['d']} dims "
          f"-> {out}")
    return 0


def run_prompts(args) -> int:
    from countlens.llm.models import load_tokenizer
    from countlens.llm.prompts import build_prompts, mark_boundary

    if args.show < 1:
        raise UsageError(f"--show must be >= 1, got {args.show}")
    _quiet_transformers()
    settings = _settings(args)
    tokenizer = load_tokenizer(args.model, args.gguf_file)
    prompts = sorted(build_prompts(tokenizer, settings), key=lambda p: p.n)
    step = max(1, len(prompts) // args.show)
    for p in prompts[::step][:args.show]:
        print(f"--- n={p.n} m={p.m} pair={p.pair} config={p.config} seed={p.seed} tokens={p.n_tokens} "
              f"boundary_index={p.boundary_index}")
        print(mark_boundary(tokenizer, p))
    print(f"--- {len(prompts)} prompts in all; the boundary token is marked ⟦...⟧")
    return 0
