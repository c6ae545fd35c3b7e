"""``countlens llm patch``: Figure 9a (``--positions boundary``, boundary patching,
:mod:`countlens.llm.patching.experiment`) and Figure 11 (``--positions all|items``, patching over positions,
:mod:`countlens.llm.positions.experiment`): parse, build the config, run, save, draw."""

from __future__ import annotations

from countlens.core.args import (
    INT_LIST,
    HelpFormatter,
    add_common_options,
    add_config_options,
    config_values,
    ints_text,
    threaded,
)
from countlens.core.errors import ConfigError
from countlens.llm.capture.options import MODEL_OPTIONS, add_capture_options, capture_options, parse_counts

PATCH_COMMAND = (*MODEL_OPTIONS, "task", "L", "per_count", "pairs", "configs", "seeds", "template", "locations",
                 "batch_size", "answer_tokens", "device", "dtype")

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


def register(sub) -> None:
    """Add ``patch`` to the ``countlens llm`` subcommands ``sub``."""
    from countlens.llm.patching.experiment import PatchingConfig
    from countlens.llm.positions.experiment import POSITION_SETS, PositionPatchingConfig

    pd, xd = PatchingConfig(), PositionPatchingConfig()
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
    add_config_options(pa, PatchingConfig, _BOUNDARY, unset=True, when="--positions boundary")
    pa.add_argument("--counts", dest="counts", default=None,
                    help=f"counts n >= 1 of the clean prompts (--positions all|items): {INT_LIST} (default: "
                         f"{ints_text(xd.prompts.counts)})")
    add_config_options(pa, PositionPatchingConfig, _POSITIONS, unset=True, when="--positions all|items")
    add_config_options(pa, PositionPatchingConfig, ("min_gap",), unset=True)
    add_common_options(pa, "quiet", "threads", threads=None)
    pa.set_defaults(func=cmd_patch)


# The settings of one mode of ``patch`` alone: boundary patching's (Figure 9a), patching over positions' (Figure 11).
_BOUNDARY = ("sources", "targets")
_POSITIONS = ("flip", "location_step", "method")


def _given(args, *names: str) -> list[str]:
    return [name for name in names if getattr(args, name, None) is not None]


@threaded
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
    given = config_values(args)
    config = PatchingConfig().with_options(**capture_options(args, PATCH_COMMAND),
                                           **{n: given[n] for n in (*_BOUNDARY, "min_gap") if n in given})
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
    given = config_values(args)
    values = {n: given[n] for n in (*_POSITIONS, "min_gap") if n in given}
    if args.counts is not None:
        values["counts"] = parse_counts(args.counts, "counts")
    config = PositionPatchingConfig().with_options(**capture_options(args, names), positions=args.positions,
                                                   **values)
    result = run_position_patching(config, progress=not args.quiet)
    result.save(args.out)
    draw_position_patching(result, args.out)
    half = result.boundary_half
    text = f"; the boundary first carries half the flipped item's effect {half['label']}" if half else ""
    print(f"patched {len(result.pairs)} prompt pairs at {len(result.locations)} locations x their positions "
          f"({result.cells} cells, {result.runs} patched runs); {result.n_unnormalised} pairs too close to "
          f"normalise{text} -> {args.out}")
    return 0


__all__ = ["PATCH_COMMAND", "register", "cmd_patch"]
