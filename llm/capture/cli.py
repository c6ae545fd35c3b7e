"""``countlens llm capture``, ``prompts`` and ``pairs``: parse, build a :class:`CaptureConfig`, run, print.

The options are the capture options (:mod:`countlens.llm.capture.options`), declared once for every command.
"""

from __future__ import annotations

from countlens.core.args import HelpFormatter, add_common_options, threaded
from countlens.core.errors import ConfigError
from countlens.core.fields import AtLeast
from countlens.llm.capture.experiment import CaptureConfig
from countlens.llm.capture.options import MODEL_OPTIONS, PROMPT_OPTIONS, add_capture_options, capture_options
from countlens.llm.prompts import CANDIDATE_PAIRS, parse_pairs

CAPTURE_COMMAND = (*PROMPT_OPTIONS, "locations", "batch_size", "backend", "device", "dtype", "acts_dtype",
                   "padding_side", "shard_rows", "positions", "answers", "answer_tokens", "random_init", "init_seed")
PAIRS_COMMAND = (*MODEL_OPTIONS, "configs", "template")


def register(sub) -> None:
    """Add ``capture``, ``prompts`` and ``pairs`` to the ``countlens llm`` subcommands ``sub``."""
    defaults = CaptureConfig()
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
    add_common_options(cap, "quiet", "threads", threads=None)
    cap.set_defaults(func=cmd_capture)

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


@threaded
def cmd_capture(args) -> int:
    from countlens.llm.capture.experiment import run_capture
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = CaptureConfig().with_options(**capture_options(args, CAPTURE_COMMAND))
    if args.ray is None:
        result = run_capture(config, args.out, progress=not args.quiet, notify=print)
    else:
        from countlens.llm.capture.distributed import run_capture_on_ray

        result = run_capture_on_ray(config, args.out, args.ray, progress=not args.quiet, notify=print)
    meta = result.meta
    rows = f" ({result.n_rows} rows: every item and the boundary)" if meta.positions == "items" else ""
    print(f"captured {meta.n_prompts} prompts{rows} x {len(meta.locations)} locations x {meta.d} dims "
          f"-> {result.folder}")
    return 0


def cmd_prompts(args) -> int:
    from countlens.llm.capture.experiment import plan_capture
    from countlens.llm.models import quiet_transformers
    from countlens.llm.prompts import mark_boundary

    AtLeast(1)(args.show, "show")
    quiet_transformers()
    plan = plan_capture(CaptureConfig().with_options(**capture_options(args, PROMPT_OPTIONS)))
    prompts = sorted(plan.prompts, key=lambda p: p.n)
    step = max(1, len(prompts) // args.show)
    for p in prompts[::step][:args.show]:
        tokens = p.item_tokens()[0]
        items = (f"{p.first_item_index}..{p.last_item_index}" if tokens == list(range(p.first_item_index,
                 p.last_item_index + 1)) or not tokens else ",".join(map(str, tokens)))
        print(f"--- n={p.n} m={p.m} pair={p.pair} config={p.config} seed={p.seed} tokens={p.n_tokens} "
              f"boundary_index={p.boundary_index} items={items}")
        print(mark_boundary(plan.tokenizer, p))
    task = plan.config.prompts.task
    print(f"--- {len(prompts)} prompts in all{'' if task == 'lists' else f' of the task {task}'}; the boundary "
          "token is marked ⟦...⟧")
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


__all__ = ["CAPTURE_COMMAND", "PAIRS_COMMAND", "register", "cmd_capture", "cmd_prompts", "cmd_pairs"]
