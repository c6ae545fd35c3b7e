"""``countlens organism``: train a model organism (``train``) and check a trained one against its planted
circuit (``check``). Parse, build an :class:`~countlens.llm.organisms.experiment.OrganismConfig`, run, save."""

from __future__ import annotations

import sys

from countlens.core.args import HelpFormatter, Option, add_common_options, add_config_options, config_values
from countlens.core.fields import AtLeast

DESCRIPTION = """\
Model organisms: small chat models of a stock architecture (Hugging Face's Llama) that countlens trains to
answer its own counting prompts, with a circuit known by construction — with --live-heads only the named
heads may write to the residual stream (every other head's slice of its block's attention output projection
is held at exactly zero). An organism folder loads with AutoModelForCausalLM.from_pretrained and every
countlens command runs on it (--model DIR).
"""

TRAIN_DESCRIPTION = """\
Train a counting organism into OUT: a LlamaForCausalLM with the tokenizer and chat template of --tokenizer
(default: the embedded SmolLM2's), trained on every wording and token pair of the default prompt set at counts
0..L with the loss on the answer tokens only (the count as the tokenizer writes it, then end-of-turn), until
its greedy answer is right on --target-accuracy of held-out prompts (other seeds). OUT holds the weights,
tokenizer, chat template, organism.json (config, training curve, held-out accuracy per count) and
organism_held_out.csv. An interrupted run resumes from OUT/.train/checkpoint.pt; a finished one is reused.
Attention-only organisms keep Llama's MLPs with one hidden unit and every MLP weight frozen at zero.
"""

CHECK_DESCRIPTION = """\
Run countlens's experiments on a trained organism (on its held-out prompts) and check each against what the
construction guarantees: greedy accuracy >= 0.99; ablating a zeroed head (Figure 12, on a float64 copy)
changes the logit difference by at most 1e-6 nats, the same for every zeroed head; the heads whose ablation
matters most are exactly the live ones; removing every live head of the item-reading block (that of the live
head attending most from the boundary to the targets) leaves greedy accuracy at most twice chance; direct logit
attribution gives zeroed heads nothing and ranks the live ones first; patching the boundary's last residual
with a source prompt's makes the source count's first answer token the answer's first token on >= 95 % of
pairs, and after the last live block the source prompt's own first token on every pair; position patching
(Figure 11) finds the flipped item's effect at the item before the first live block (>= 0.99) and not yet at
the boundary (<= 0.01), and at the boundary after the last live block (>= 0.99); a ridge probe reads the count
at the boundary (test rounded accuracy >= 0.95) right after the first block with a live head, and not before
it; distributed alignment search (ranks 1, 2, 4 and full) reaches an interchange accuracy >= 0.95 after the last
live block and stays <= 0.05 up to the first live block's input. Count-unit steering's slope along the mean
difference is reported with no bound (INFO): nothing planted makes the count linearly steerable. Prints one
PASS/FAIL line per check; exit 1 when any fails.
"""


SCALING_DESCRIPTION = """\
The toy theory on a real architecture: organisms as close to the toy as Llama allows (one block, one head,
attention-only; Llama's pre-norm RMSNorm with a learned gain, the toy's softmax-preln-learned placement),
counting one target among one distractor in one wording as the toy does, trained at each L and seed (each resumable in OUT/L{L}-seed{s}, reused from the countlens cache). For each:
Figure 5's gap and effective-rank ratios, Figure 6's PCA and the endpoint angle at the boundary after the
block, the smallest norm of a ridge probe that rounds exactly, and the organism's largest parameter-vector
norm; beside the toy variant's B_min(L) and, with --llm-acts, an LLM capture. Fits the norm-scaling rate as a
log-log slope per seed (mean and spread) next to the toy's and the paper's. Writes organism_scaling.json,
organism_scaling.csv and organism_scaling.png into OUT.
"""


def register(subparsers) -> None:
    """Add ``countlens organism`` and its subcommands."""
    from countlens.llm.organisms.experiment import SOFTMAX, OrganismConfig, parse_live_heads
    from countlens.llm.organisms.scaling import ScalingConfig
    from countlens.llm.prompts import parse_pairs

    d = OrganismConfig()
    area = subparsers.add_parser("organism", help="train chat models that count, with a planted circuit",
                                 description=DESCRIPTION, formatter_class=HelpFormatter)
    sub = area.add_subparsers(dest="organism_command", metavar="ORGANISM_COMMAND", parser_class=type(area))
    sub.required = True
    tr = sub.add_parser("train", help="train an organism into a folder (resumable)", description=TRAIN_DESCRIPTION,
                        formatter_class=HelpFormatter)
    tr.add_argument("--out", required=True, help="the organism's folder (new, empty, or an organism to resume)")
    add_config_options(tr, d, [n for n in _TRAIN_SETTINGS], options={
        "softmax": Option("softmax", choices=SOFTMAX),
        "live_heads": Option("live_heads", parse=lambda text, field: parse_live_heads(text)),
        "pairs": Option("pairs", parse=lambda text, field: parse_pairs(text))})
    add_common_options(tr, "quiet")
    add_common_options(tr, "threads")
    tr.set_defaults(func=cmd_train)
    ch = sub.add_parser("check", help="check countlens's read-outs against an organism's planted circuit",
                        description=CHECK_DESCRIPTION, formatter_class=HelpFormatter)
    ch.add_argument("--model", required=True, help="the organism's folder (written by organism train)")
    ch.add_argument("--out", default=None, help="folder for checks.json, checks.csv and each experiment the checks "
                    "ran, kept with its figures in OUT/<experiment>/ and reused by a rerun (default: none)")
    add_common_options(ch, "quiet")
    add_common_options(ch, "threads")
    ch.set_defaults(func=cmd_check)
    sc = sub.add_parser("scaling", help="toy <-> organism <-> LLM: one-head organisms trained at several L",
                        description=SCALING_DESCRIPTION, formatter_class=HelpFormatter)
    sc.add_argument("--out", required=True, help="folder for the organisms (one per L and seed, resumable), "
                                                 "organism_scaling.json / .csv and the figure")
    sc.add_argument("--preset", choices=("quick", "full", "test"), default="quick",
                    help="sizes: quick (L = 10, 30; two seeds), full (L = 10, 30, 100; three seeds), test (tiny)")
    add_config_options(sc, ScalingConfig, _SCALING_SETTINGS, unset=True, default_text="the preset's")
    sc.add_argument("--workers", type=int, default=1,
                    help="processes training organisms side by side, the largest L first, one torch thread each "
                         "(--threads is then unused; the table is that of one worker on one thread)")
    add_common_options(sc, "quiet")
    add_common_options(sc, "threads", threads=2)
    sc.set_defaults(func=cmd_scaling)


# The organism's settings ``organism train`` takes (the rest keep OrganismConfig's defaults).
_TRAIN_SETTINGS = ("L", "layers", "heads", "width", "attention_only", "live_heads", "seed", "tokenizer", "pairs",
                   "lr", "warmup", "decay", "batch_size", "softmax", "max_steps", "eval_every", "target_accuracy")
# The scaling settings ``organism scaling`` takes over its preset's.
_SCALING_SETTINGS = ("Ls", "seeds", "width", "max_steps", "llm_acts", "llm_location")


def train_config(args):
    """The :class:`OrganismConfig` of a ``train`` command line."""
    from countlens.llm.organisms.experiment import OrganismConfig

    return OrganismConfig(**config_values(args, OrganismConfig))


def cmd_train(args) -> int:
    from countlens.core.threads import torch_threads
    from countlens.llm.models import quiet_transformers
    from countlens.llm.organisms.experiment import heads_text, run_organism

    quiet_transformers()
    config = train_config(args)
    with torch_threads(AtLeast(1)(args.threads, "threads")):
        result = run_organism(config, out=args.out, progress=not args.quiet)
    worst = min(result.held_out, key=lambda r: r["accuracy"])
    print(f"organism: {result.n_layers} blocks x {result.n_heads} heads, width {result.d}"
          f"{', attention-only' if result.mlp_width == 0 else ''}, live heads {heads_text(result.live_heads)}; "
          f"{result.steps} steps in {result.train_seconds:.0f} s; held-out greedy accuracy "
          f"{result.held_out_accuracy:.4f} (lowest: n={worst['n']} at {worst['accuracy']:.3f}) -> {args.out}")
    if not result.converged:
        print(f"organism: the held-out accuracy did not reach {config.target_accuracy} in {config.max_steps} steps; "
              "rerun with a larger --max-steps to continue", file=sys.stderr)
        return 1
    return 0


def cmd_check(args) -> int:
    from countlens.core.threads import torch_threads
    from countlens.llm.models import quiet_transformers
    from countlens.llm.organisms.checks import check_organism, checks_text
    from countlens.llm.organisms.views import draw_checks

    quiet_transformers()
    with torch_threads(AtLeast(1)(args.threads, "threads")):
        result = check_organism(args.model, keep=args.out, progress=not args.quiet)
    if args.out:
        result.save(args.out)
        draw_checks(result, args.out)
    for line in checks_text(result):
        print(f"organism check: {line}")
    failed = result.failed()
    if failed:
        print(f"organism check: {len(failed)} of {len(result.checks)} checks FAILED: "
              f"{', '.join(c['name'] for c in failed)}", file=sys.stderr)
        return 1
    return 0


def scaling_config(args):
    """The :class:`~countlens.llm.organisms.scaling.ScalingConfig` of a ``scaling`` command line: the preset's,
    with the options given."""
    import dataclasses

    from countlens.llm.organisms.scaling import PRESETS

    return dataclasses.replace(PRESETS[args.preset], **config_values(args))


def cmd_scaling(args) -> int:
    from countlens.core.threads import torch_threads
    from countlens.llm.models import quiet_transformers
    from countlens.llm.organisms.figures import draw_scaling
    from countlens.llm.organisms.scaling import run_scaling

    quiet_transformers()
    config = scaling_config(args)
    with torch_threads(AtLeast(1)(args.threads, "threads")):
        result = run_scaling(config, out=args.out, progress=not args.quiet, workers=args.workers)
    result.save(args.out)
    draw_scaling(result, args.out)
    rate = result.rates["organism_norm"]

    def num(x):
        return "n/a" if x is None else f"{x:.3f}"
    unconverged = [r["label"] for r in result.organisms() if not r["converged"]]
    print(f"organism scaling: {len(result.organisms())} organisms ({result.norm_placement.split(':')[0]}); "
          f"log-log slope of B {num(rate['mean'])} +- {num(rate['std'])} over seeds, toy {result.toy_variant} "
          f"{num(result.rates['toy'])}, paper {result.rates['paper_text']}; {result.seconds:.0f} s -> {args.out}")
    print("organism scaling: held-out accuracy (lowest per count): " + ", ".join(
        f"L={r['L']} seed={r['seed']} {num(r['held_out_accuracy'])} ({num(r['held_out_min_count'])})"
        for r in result.organisms()))
    if unconverged:
        print(f"organism scaling: not converged (rerun with a larger --max-steps to continue): "
              f"{', '.join(unconverged)}", file=sys.stderr)
        return 1
    return 0


__all__ = ["DESCRIPTION", "CHECK_DESCRIPTION", "SCALING_DESCRIPTION", "register", "train_config", "cmd_train",
           "cmd_check", "scaling_config", "cmd_scaling"]
