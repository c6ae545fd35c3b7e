"""``countlens llm das`` (the causal count subspace, :mod:`countlens.llm.das.experiment`): parse, build a
:class:`DasConfig`, run, save, draw."""

from __future__ import annotations

from countlens.core.args import HelpFormatter, Option, add_common_options, ints_text, threaded
from countlens.llm.capture.options import MODEL_OPTIONS, add_capture_options, capture_options

DAS_COMMAND = (*MODEL_OPTIONS, "task", "L", "counts", "per_count", "pairs", "configs", "seeds", "template",
               "locations", "batch_size", "device", "dtype")

# DAS's own settings, each an option derived from its field (help: DasConfig.HELP)
DAS_OPTIONS = ("ranks", "held_out", "sources", "steps", "lr", "seed", "random_model")
NO_RANDOM_MODEL = Option("random_model", alias="--no-random-model",
                         help="skip the control of DAS on the random-initialised model of the same architecture "
                              "(default: run it)")

DAS_DESCRIPTION = """\
The causal count subspace (distributed alignment search, DAS). Per residual location at the assistant boundary
and per rank k, an orthonormal R (d x k; torch's orthogonal parametrisation) is learned so that the interchange
h_base + R R^T (h_source - h_base), written at the boundary of the base prompt's run, makes the model answer the
source prompt's count: cross-entropy of the source count's first answer token, on pairs of prompts (same token
pair and wording, counts whose first answer tokens differ). Each count's prompts are split into training and
held-out prompts (--held-out); every score is on pairs built from held-out prompts only:
  IIA: the fraction of pairs whose intervened greedy first answer token is the source count's;
  shift: mean (E[n | interchange] - E[n | base]) / (n_s - n_b), the expected count over the candidate counts.
Controls on the same pairs: a random subspace of the same rank, the ridge probe's direction and the
mean-difference direction (both fitted on the training prompts) as rank-1 subspaces, DAS on the
random-initialised model (unless --no-random-model), and no interchange at all; and the principal angle between
span(R) and the probe's direction. Writes das.json, das.csv, subspaces.npz (location name -> its basis at the
largest rank, "name:k" -> its basis at rank k) and das.png/.pdf.
"""


def register(sub) -> None:
    """Add ``das`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.das.experiment import DasConfig

    dd = DasConfig()
    help_of = DasConfig.HELP
    da = sub.add_parser("das", help="the causal count subspace: learn the boundary subspace whose interchange "
                                    "moves the answer to the source count (DAS), with its controls",
                        description=DAS_DESCRIPTION, formatter_class=HelpFormatter)
    helps = {name: help_of[name] for name in ("locations", "batch_size", *DAS_OPTIONS)
             if name in help_of and name != "random_model"}  # the switch says what it turns off
    add_capture_options(da, (*DAS_COMMAND, *DAS_OPTIONS), dd, helps=helps, options={"random_model": NO_RANDOM_MODEL})
    da.add_argument("--out", required=True, help="output folder")
    add_common_options(da, "quiet", "threads", threads=None)
    da.set_defaults(func=cmd_das)


@threaded
def cmd_das(args) -> int:
    from countlens.llm.das.experiment import DasConfig, run_das
    from countlens.llm.das.figures import draw_das
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    config = DasConfig().with_options(**capture_options(args, (*DAS_COMMAND, *DAS_OPTIONS)))
    result = run_das(config, progress=not args.quiet)
    result.save(args.out)
    draw_das(result, args.out)
    best = max(result.rows, key=lambda r: (r["iia"], -r["rank"]))
    print(f"DAS at {len(result.locations)} locations x ranks {ints_text(config.ranks)} on "
          f"{result.n_train_pairs} training / {result.n_held_out_pairs} held-out pairs; the highest held-out IIA is "
          f"{best['iia']:.2f} at {best['location']} (rank {best['rank']}; random subspace {best['iia_random']:.2f}) "
          f"in {result.seconds:.1f} s -> {args.out}")
    return 0


__all__ = ["DAS_COMMAND", "DAS_OPTIONS", "register", "cmd_das"]
