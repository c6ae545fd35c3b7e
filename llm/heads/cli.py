"""``countlens llm heads`` (Figure 12): parse, build a :class:`HeadsConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, add_common_options, config_values, threaded
from countlens.llm.capture.options import MODEL_OPTIONS, add_capture_options

HEADS_COMMAND = (*MODEL_OPTIONS, "task", "L", "counts", "per_count", "pairs", "configs", "seeds", "template", "batch_size",
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


def register(sub) -> None:
    """Add ``heads`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.heads.experiment import HeadsConfig

    hd = HeadsConfig()
    he = sub.add_parser("heads", help="Figure 12: attention mass of every head to the items, and head ablation",
                        description=HEADS_DESCRIPTION, formatter_class=HelpFormatter)
    add_capture_options(he, (*HEADS_COMMAND, "layers", "ablate_prompts", "flip", "probes", "location"), hd, helps={
        "counts": f"counts n of the prompts (ablation needs n >= 1): {INT_LIST}",
        "batch_size": "prompts per forward pass (an ablation step runs all heads of a block for them)"})
    he.add_argument("--out", required=True, help="output folder")
    add_common_options(he, "quiet", "threads", threads=None)
    he.set_defaults(func=cmd_heads)


@threaded
def cmd_heads(args) -> int:
    from countlens.llm.heads.experiment import HeadsConfig, run_heads
    from countlens.llm.heads.figures import draw_heads
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = HeadsConfig().with_options(**config_values(args))
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


__all__ = ["HEADS_COMMAND", "register", "cmd_heads"]
