"""``countlens llm components`` (Figure 14): parse, build a :class:`ComponentsConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import INT_LIST, HelpFormatter, add_common_options, config_values, threaded
from countlens.llm.capture.options import MODEL_OPTIONS, add_capture_options

COMPONENTS_COMMAND = (*MODEL_OPTIONS, "task", "L", "counts", "per_count", "pairs", "configs", "seeds", "template",
                      "batch_size", "device", "dtype")
COMPONENTS_DESCRIPTION = """\
Figure 14: which component writes the answer. Direct logit attribution at the assistant boundary: the last
block's output there is the embeddings plus every block's attention and MLP write; each write (and each
head's share of its block's attention write) is read through the final norm with its scale frozen at the
real residual and through the unembedding, and scored on two logit differences of the boundary's next token:
answer = the correct count's first token against the model's own greedy first token, and previous = n's
first token against n - 1's. The embeddings, the writes and the read-out's constant sum to the model's own
logit difference. Linear at the real run's point: a component that writes nothing directly can still matter
through later ones. On at most --ablate-prompts prompts each block's attention and MLP write and each head
(--layers) is replaced by its mean (--source mean) or by the prompt's twin's own write (--source twin: one
target turned into the distractor), at the boundary or at every position (--scope), and scored by the
normalised logit difference of n against n - 1 (1 = the clean run, 0 = the twin's) and the shift of the
expected count. Architectures whose attention and MLP writes the hook-site registry does not know, and blocks
the model lacks, are refused before the weights load. Writes components.json, components.csv and fig14_components.png/.pdf.
"""


def register(sub) -> None:
    """Add ``components`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.components.experiment import ComponentsConfig

    cd = ComponentsConfig()
    co = sub.add_parser("components", help="Figure 14: direct logit attribution of every block and head at the "
                                           "boundary", description=COMPONENTS_DESCRIPTION,
                        formatter_class=HelpFormatter)
    add_capture_options(co, (*COMPONENTS_COMMAND, "ablate_prompts", "flip", "source", "scope", "layers"), cd, helps={
        "counts": f"counts n of the prompts (the previous-count difference needs n >= 1): {INT_LIST}",
        "batch_size": "prompts per prompt pass (each answered greedily from its own pass)"})
    co.add_argument("--out", required=True, help="output folder")
    add_common_options(co, "quiet", "threads", threads=None)
    co.set_defaults(func=cmd_components)


@threaded
def cmd_components(args) -> int:
    from countlens.llm.components.experiment import ComponentsConfig, run_components
    from countlens.llm.components.figures import draw_components
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = ComponentsConfig().with_options(**config_values(args))
    result = run_components(config, progress=not args.quiet)
    result.save(args.out)
    draw_components(result, args.out)
    top = result.top_heads("answer", 1)
    text = f"; L{top[0][0]}H{top[0][1]} has the largest direct share of the answer logit difference ({top[0][2]:+.3f} nats)" \
        if top else ""
    wrong = sum(p["answer"] != p["n"] for p in result.prompts)
    later = sum((p.get("answer_position") or 0) > 0 for p in result.prompts)
    unread = sum(p.get("answer_position", 0) is None for p in result.prompts)
    read = f"; {later} read past the answer's first token, where the answers first differ" if later else ""
    read += f"; {unread} go on past the whole correct answer (no one token to compare)" if unread else ""
    print(f"components: {result.n_layers} blocks x {result.n_heads} heads on {len(result.prompts)} prompts "
          f"({wrong} answered wrong{read}){text} -> {args.out}")
    return 0


__all__ = ["COMPONENTS_COMMAND", "register", "cmd_components"]
