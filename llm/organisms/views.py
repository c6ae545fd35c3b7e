"""The organism checks' figures and report view: the checks table, and the figures of the experiments the
checks ran on the organism (kept by :class:`countlens.llm.organisms.checks.Kept`), each drawn by the figure
its experiment declares (:mod:`countlens.core.registry`) — the same files its own stage writes on a
pretrained model, here on a model whose circuit is known."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.organisms.checks import OrganismChecks

# What the planted circuit says each kept figure must show on the organism (the checks hold the numbers).
PLANTED = {
    "probe": "the count is read at the boundary from the first location after a block with a live head, and "
             "at no location before it",
    "patching": "patching the boundary's last residual with a source prompt's gives the source count's first "
                "answer token; after the last live block the patched boundary answers exactly as the source "
                "prompt does",
    "steering": "nothing: the construction does not make the count linearly steerable, so the slope is shown "
                "with no bound (the exact interchange after the last live block is the steering it guarantees)",
    "probe-running": "before the first block with a live head each item's residual is its own token's, so no "
                     "running count is read there; after it the figure shows where the organism keeps one",
    "patching-positions": "the flipped item's effect sits at the item before the live heads' blocks and at the "
                          "boundary after them",
    "heads": "only the live heads' ablation moves the logit difference; a zeroed head changes nothing",
    "lens": "at the last location the logit lens is the organism's own read-out; the construction says nothing "
            "of earlier locations",
    "components": "a zeroed head writes nothing directly to the answer's logits; the live heads come first",
    "attribution": "attribution patching gives every zeroed head exactly nothing and ranks the live heads first",
    "das": "after the last live block a learned subspace (at full rank, boundary patching) makes the boundary "
           "answer the source count; up to the first live block's input no subspace moves anything",
}


def draw_checks(result: OrganismChecks, folder: str | Path) -> list[Path]:
    """Each kept experiment's figures (``folder/<experiment>/``), drawn by its declared ``figure`` from its
    kept result; the paths written."""
    from countlens.llm.organisms.kept import declared

    written: list[Path] = []
    for kept in result.kept:
        experiment = declared(kept["name"])
        draw = experiment.draw()
        if draw is not None:
            place = Path(folder) / kept["name"]
            written += list(draw(experiment.result.read(place), place))
    return written


def checks_view(page: Page, s: Section) -> None:
    """One row per ground-truth check, then what the kept figures (:func:`draw_checks`, shown after this
    view) must show; ``s.result`` is the :class:`~countlens.llm.organisms.checks.OrganismChecks`."""
    rel = s.rel
    page.caption(
        "Each check runs a countlens experiment on the organism's held-out prompts and holds one number to what "
        "the planted circuit guarantees (countlens.llm.organisms.checks says why each bound holds by "
        "construction); a failed check is a defect of the read-out, or an organism that did not learn. A row "
        "whose rule is \"info\" is a read-out shown with no bound, because the construction guarantees nothing "
        "of it.")
    rows = [[page.v(rel, "checks", i, "name"), page.v(rel, "checks", i, "value"), page.v(rel, "checks", i, "holds"),
             page.v(rel, "checks", i, "bound"), page.v(rel, "checks", i, "passed"), page.v(rel, "checks", i, "detail")]
            for i in range(len(s.result.checks))]
    page.add(table(["check", "value", "must be", "bound", "passed", "on"], rows))
    if not s.result.kept:
        return
    folder = str(Path(rel).parent)
    page.caption(
        "The same experiments on the organism, drawn below with the figures and files their own stages write: "
        "read each beside its section above, where it runs on the embedded model, whose mechanism nobody "
        f"planted. Here the live heads are {page.values(rel, 'live_heads')} (block and head) and every other "
        "head writes exactly nothing, so each figure has a known answer.")
    rows = []
    for i, kept in enumerate(s.result.kept):
        link = html.escape(f"{folder}/{kept['name']}/{kept['file']}")
        rows.append([page.v(rel, "kept", i, "title"), f'<a href="{link}">{page.v(rel, "kept", i, "name")}/{page.v(rel, "kept", i, "file")}</a>',
                     html.escape(PLANTED.get(kept["name"], "—"))])
    page.add(table(["figure", "result", "what the planted circuit says it must show"], rows, left=(0, 1, 2)))


__all__ = ["PLANTED", "draw_checks", "checks_view"]
