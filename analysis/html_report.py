"""``OUT/index.html`` for ``countlens reproduce``, built only from the JSON files the stages wrote.

The page is laid out from the stages it is given, in their order: each stage's heading is its title, its
result file is read back through its result type's ``from_dict``, and its ``view`` (one of the functions
below) writes its tables, captions and caveats; its figures are the PNGs its ``stage.json`` lists, each a
link to the full-resolution PNG and PDF.

Every value shown is a ``<span class="v" data-json=FILE data-key=[...]>`` read from ``FILE`` at that key
path (formatted by :func:`format_value`); a ratio of two values is a ``<span class="q">`` naming both key
paths (``data-key`` over ``data-over``); a key shown as a label is a ``<span class="k">``. All other text is
fixed prose with no digits other than figure and table numbers. An inline script counts images that fail
to load into ``<body data-broken-images>`` and records the page's and the window's widths
(``data-scroll-width``, ``data-viewport-width``), so a headless browser can check the page.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from countlens.errors import UsageError
from countlens.io import write_text_atomic

REPORT_FILE = "reproduce.json"
STAGE_FILE = "stage.json"

_SCRIPT = """<script>
window.addEventListener('load', function () {
  var broken = 0;
  document.querySelectorAll('img').forEach(function (im) { if (!im.complete || im.naturalWidth === 0) broken++; });
  document.body.setAttribute('data-broken-images', String(broken));
  document.body.setAttribute('data-images', String(document.images.length));
  document.body.setAttribute('data-scroll-width', String(document.documentElement.scrollWidth));
  document.body.setAttribute('data-viewport-width', String(document.documentElement.clientWidth));
});
</script>"""

# Fluid from a phone-sized window to a wide screen: the text column grows to a comfortable measure, figures
# to the width of the window, and wide tables scroll inside their own box instead of the page.
_STYLE = """<style>
*, *::before, *::after { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { font-family: system-ui, sans-serif; line-height: 1.45; color: #222; margin: 0;
       padding: 1.5rem clamp(0.75rem, 3vw, 3rem); overflow-wrap: anywhere; }
main { max-width: 96rem; margin: 0 auto; }
p, ul, .caption { max-width: 60rem; }
h2 { margin-top: 2.2em; border-bottom: 1px solid #ddd; }
.scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5em 0 0.3em; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; overflow-wrap: normal; }
th { background: #f6f6f6; vertical-align: bottom; }
td.l, th.l { text-align: left; }
td:first-child { white-space: nowrap; }
.caption { color: #555; font-size: 0.85em; margin: 0 0 1.5em; }
figure { margin: 1em 0 1.5em; }
figure img { display: block; width: 100%; max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
.failed { color: #b00; } .muted { color: #777; font-size: 0.85em; }
.caveats li { margin: 0.3em 0; }
</style>"""


def format_value(value: Any) -> str:
    """How a JSON value is shown: floats to 4 significant digits, None as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def lookup(obj: Any, keys: list) -> Any:
    """``obj[k0][k1]...``; raises ``KeyError`` or ``IndexError`` if the path is absent."""
    for k in keys:
        obj = obj[k]
    return obj


class StageLike(Protocol):
    """What the page needs of a stage (``countlens.reproduce.Stage``)."""

    name: str
    title: str
    outputs: tuple[str, ...]
    result_type: Any
    view: Callable[[Page, Section], None] | None


@dataclass
class Section:
    """One stage's part of the page: its result file ``rel`` (relative to OUT), the JSON ``data`` and the
    ``result`` read back from it."""

    stage: StageLike
    rel: str
    data: dict[str, Any]
    result: Any


class Page:
    """The page being written: JSON files read once, value spans, and the HTML parts in order."""

    def __init__(self, out: Path):
        self.out = out
        self.cache: dict[str, Any] = {}
        self.parts: list[str] = []

    def load(self, rel: str) -> Any | None:
        if rel not in self.cache:
            path = self.out / rel
            try:
                self.cache[rel] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.cache[rel] = None
        return self.cache[rel]

    def has(self, rel: str, *keys) -> bool:
        try:
            lookup(self.load(rel), list(keys))
        except (KeyError, IndexError, TypeError):
            return False
        return True

    def get(self, rel: str, *keys, default: Any = None) -> Any:
        return lookup(self.load(rel), list(keys)) if self.has(rel, *keys) else default

    def v(self, rel: str, *keys) -> str:
        """A value span: the value at ``keys`` in JSON file ``rel``."""
        value = lookup(self.load(rel), list(keys))
        return (f'<span class="v" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(list(keys)))}">'
                f"{html.escape(format_value(value))}</span>")

    def v_or_dash(self, rel: str, *keys) -> str:
        return self.v(rel, *keys) if self.has(rel, *keys) else "—"

    def q(self, rel: str, keys: list, over: list) -> str:
        """A ratio span: the value at ``keys`` over the value at ``over``, both in ``rel``."""
        ratio = float(lookup(self.load(rel), keys)) / float(lookup(self.load(rel), over))
        return (f'<span class="q" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(keys))}" '
                f'data-over="{html.escape(json.dumps(over))}">{html.escape(format_value(ratio))}</span>')

    def k(self, rel: str, *keys) -> str:
        """A key-label span: the last key of the path (a dict key in ``rel``)."""
        return (f'<span class="k" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(list(keys)))}">'
                f"{html.escape(str(keys[-1]))}</span>")

    def values(self, rel: str, *keys, limit: int = 12) -> str:
        """A list value as spans: all of a short list, the first ones and the last of a long one."""
        items = self.get(rel, *keys, default=[])
        if len(items) <= limit:
            return ", ".join(self.v(rel, *keys, i) for i in range(len(items)))
        return (", ".join(self.v(rel, *keys, i) for i in range(limit - 1)) + ", …, "
                + self.v(rel, *keys, len(items) - 1))

    def add(self, text: str) -> None:
        self.parts.append(text)

    def caption(self, text: str) -> None:
        self.add(f'<p class="caption">{text}</p>')


def table(header: list[str], rows: list[list[str]], left: int | tuple[int, ...] = 1) -> str:
    """An HTML table in its own scroll box; cells are rendered HTML; the first ``left`` columns (or those
    listed) align left."""
    lefts = set(range(left)) if isinstance(left, int) else set(left)
    head = "".join(f'<th class="{"l" if i in lefts else ""}">{h}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i in lefts else ""}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


def _scalar(x: Any) -> bool:
    return x is None or isinstance(x, (int, float, str, bool))


def _generic(page: Page, rel: str, obj: Any, path: list, rows: list, depth: int = 0) -> None:
    """Flatten a JSON object into (key path, value) rows; lists of scalars on one row."""
    if len(rows) >= 80 or depth > 5:
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "provenance" and depth == 0:
                continue
            _generic(page, rel, value, path + [key], rows, depth + 1)
    elif isinstance(obj, list) and obj and all(_scalar(x) for x in obj):
        rows.append([_path_label(page, rel, path), page.values(rel, *path)])
    elif isinstance(obj, list):
        for i, value in enumerate(obj[:12]):
            _generic(page, rel, value, path + [i], rows, depth + 1)
    elif _scalar(obj):
        rows.append([_path_label(page, rel, path), page.v(rel, *path)])


def _path_label(page: Page, rel: str, path: list) -> str:
    return " / ".join(page.k(rel, *path[:i + 1]) if isinstance(key, str) else "·" for i, key in enumerate(path))


def generic_table(page: Page, rel: str) -> str:
    """Every key of a JSON file and its value (the fallback for a result no view knows)."""
    rows: list = []
    _generic(page, rel, page.load(rel), [], rows)
    return table(["key", "value"], rows) if rows else ""


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _preset_phrase(page: Page) -> str:
    return f"preset {page.v(REPORT_FILE, 'preset')}"


# ------------------------------------------------------------------------------------------- Table 1


def rates_view(page: Page, s: Section) -> None:
    """Table 1, rates: one row per variant, one column per length of the grid."""
    rel, variants = s.rel, s.data.get("variants", {})
    where: dict[Any, tuple[str, int]] = {}
    for name, entry in variants.items():
        for i, L in enumerate(entry.get("L", [])):
            where.setdefault(L, (name, i))
    Ls = sorted(where, key=float)
    header = ["variant", "claimed exponent", "fitted slope, whole grid", "fitted slope, large lengths"] + [
        "B_min at L = " + page.v(rel, "variants", where[L][0], "L", where[L][1]) for L in Ls]
    rows = []
    for name, entry in variants.items():
        index = {L: i for i, L in enumerate(entry.get("L", []))}
        rows.append([page.k(rel, "variants", name), page.v_or_dash(rel, "variants", name, "claimed"),
                     page.v_or_dash(rel, "variants", name, "slope"),
                     page.v_or_dash(rel, "variants", name, "slope_L_ge_100"),
                     *[page.v_or_dash(rel, "variants", name, "b_min", index[L]) if L in index else "—"
                       for L in Ls]])
    page.add(table(header, rows))
    page.caption(
        f"Limited by the grid of lengths in the header (d = {page.v_or_dash(rel, 'd')}, τ = "
        f"{page.v_or_dash(rel, 'tau')}, {_preset_phrase(page)}). Each B_min is the largest vector norm of the "
        "variant's checked construction, an upper bound on the true B_min. The slopes are least-squares fits of "
        "log B_min on log L, over the whole grid and over its lengths from a hundred on (a dash where the grid "
        "has fewer than two); the claimed rates are asymptotic, and small lengths bend the post-LN fits. "
        "Bare pre-LN is infinite past L_cap (below).")


def lcap_view(page: Page, s: Section) -> None:
    """Table 1, L_cap(d) of bare pre-LN, with the lengths the search leaves undecided."""
    rel = s.rel
    rows = []
    for i in range(len(s.data.get("d", []))):
        undecided = ("none" if not page.has(rel, "l_infeasible", i) or
                     s.data["l_infeasible"][i] == s.data["l_cap"][i] + 1 else
                     f"above {page.v(rel, 'l_cap', i)}, below {page.v(rel, 'l_infeasible', i)}")
        rows.append([page.v(rel, "d", i), page.v_or_dash(rel, "tau", i), page.v(rel, "l_cap", i),
                     page.v_or_dash(rel, "l_infeasible", i), undecided, page.v_or_dash(rel, "b_min_at_cap", i),
                     page.v_or_dash(rel, "worst_error_at_cap", i)])
    page.add(table(["dimension d", "τ", "L_cap: longest constructed", "shortest provably infeasible L",
                    "undecided lengths", "B_min at L_cap", "worst error at L_cap"], rows, left=0))
    page.caption(
        "Bare pre-LN puts every token on a sphere, so its attention scores are bounded and some finite length "
        "cannot be counted at any norm. L_cap is the longest length the construction search passed; the bound "
        "proves every length from the infeasible one on impossible. Lengths in between are undecided: the "
        "search found no construction and the bound does not exclude one.")


# ------------------------------------------------------------------------------------------- Table 2


def table2_view(page: Page, s: Section) -> None:
    """Table 2 in the paper's layout: mean [min, max] over seeds."""
    rel = s.rel

    def cell(i: int, key: str) -> str:
        return (f"{page.v(rel, 'rows', i, key, 'mean')} [{page.v(rel, 'rows', i, key, 'min')}, "
                f"{page.v(rel, 'rows', i, key, 'max')}]")

    rows = [[page.v(rel, "rows", i, "d"), page.v(rel, "rows", i, "L"), page.v(rel, "rows", i, "steps"),
             page.values(rel, "rows", i, "seeds"), cell(i, "test_exact_accuracy"), cell(i, "full_domain_worst_error")]
            for i in range(len(s.data.get("rows", [])))]
    page.add(table(["dimension d", "maximum count L", "steps", "seeds", "test exact accuracy, mean [min, max]",
                    "full-domain worst error, mean [min, max]"], rows, left=0))
    page.caption(
        f"Limited by the steps column ({_preset_phrase(page)}; optimiser {page.v_or_dash(rel, 'optimizer')}): "
        "the paper trained tens of millions of steps, so these runs can stop short of rounding-exact counting "
        "(worst error below one half). Test exact accuracy is on held-out pairs of the domain.")


# ------------------------------------------------------------------------------------------- Table 3


def table3_view(page: Page, s: Section) -> None:
    """Table 3: per variant and cap, constructed and attained L_max, beside the paper's constructed value."""
    rel = s.rel
    ratios: list[tuple[float, str]] = []
    rows = []
    for name, entry in s.data.get("variants", {}).items():
        base = ["variants", name]
        paper = entry.get("paper_constr")
        for i in range(len(entry.get("B", []))):
            ours_vs_paper = "—"
            if isinstance(paper, list) and i < len(paper) and _finite(paper[i]) and paper[i] > 0:
                ours_vs_paper = page.q(rel, base + ["l_max", i], base + ["paper_constr", i])
                ratios.append((entry["l_max"][i] / paper[i], ours_vs_paper))
            rows.append([page.k(rel, *base) if i == 0 else "", page.v(rel, *base, "B", i),
                         page.v_or_dash(rel, *base, "l_max", i),
                         page.v_or_dash(rel, *base, "paper_constr", i) if isinstance(paper, list) else "—",
                         ours_vs_paper, page.v_or_dash(rel, *base, "attained", i),
                         page.v_or_dash(rel, *base, "attained_next_failing", i),
                         page.v_or_dash(rel, *base, "max_norm", i), page.v_or_dash(rel, *base, "worst_error", i)])
    page.add(table(["variant", "cap B", "constructed L_max (ours)", "constructed L_max (paper)", "ours over paper's",
                    "attained L_max (trained)", "next grid length (failed)", "largest norm of our construction",
                    "its worst error"], rows))
    grid = page.get(rel, "provenance", "config", "attained_grid")
    limit = (f" the training grid ({page.values(rel, 'provenance', 'config', 'attained_grid')})"
             if isinstance(grid, list) and grid else " the training grid")
    page.caption(
        f"The attained column is the longest length of{limit} that training under the cap passed, so it "
        f"stops at the grid's end ({_preset_phrase(page)}; the full preset uses the paper's grid); a dash "
        "in the next column means no longer grid length was tried. The constructed columns are the longest "
        "integer L each checked construction passes at that cap; the paper's are given at d = sixteen only.")
    if ratios:
        lo, hi = min(ratios), max(ratios)
        page.caption(
            f"Our constructions guarantee {lo[1]} to {hi[1]} times the paper's constructed length at the same "
            "cap. They gain by fitting the read-out by a minimax (Chebyshev) fit on the letter-free slice, "
            "searching the few free scalars of each family, and spending the whole error budget of one half "
            "that the full-domain check allows, instead of the analytic margins of the paper's constructions.")


# ------------------------------------------------------------------------------------------- toy figures


def figure1_view(page: Page, s: Section) -> None:
    L = page.v(s.rel, "panels", 0, "L") if page.has(s.rel, "panels", 0, "L") else "L"
    page.caption(
        f"Boundary representations h(n, m) on the letter-free slice (no distractors), n from zero to {L}, "
        "projected to two dimensions, one panel per variant: linear attention puts the counts equally spaced "
        "on a ray, softmax compresses them along a segment, post-LN maps them onto an arc, bare pre-LN pins "
        "the segment's endpoints to a sphere. Open circles mark limiting endpoints.")


def figure2_view(page: Page, s: Section) -> None:
    rel = s.rel
    Ls = page.values(rel, "Ls") if page.has(rel, "Ls") else "the lengths shown"
    page.caption(
        f"What each read-out costs, at L = {Ls} (d = {page.v_or_dash(rel, 'd')}, {_preset_phrase(page)}). "
        "(a) Read-out norm against L. Which is which: the constructions' regression read-out grows with L while "
        "the constructed classifier's class vectors and biases stay bounded; the trained heads are not "
        "norm-minimal, and a trained classifier's class vectors can grow with L too. "
        "(b) Arc angle of the count representations on the letter-free slice (largest angle between two "
        "mean-centred attention outputs): regression squeezes the counts onto a tiny arc, the classifier "
        "spreads them. (c) The classifier's smallest winning score gap per count. "
        "(d) L_max under each cap: the constructions' lines, the attained points from Table 3.")


def figure3_view(page: Page, s: Section) -> None:
    rel = s.rel
    page.caption(
        f"Training dynamics of {page.v_or_dash(rel, 'variant')} at d = {page.v_or_dash(rel, 'd')}, L = "
        f"{page.v_or_dash(rel, 'L')} over the seeds shown ({_preset_phrase(page)}): held-out exact accuracy, "
        "parameter and score scales divided by the theory's rate, and the adjacent-spacing ratio of high over "
        "low counts.")


def figure4_view(page: Page, s: Section) -> None:
    rel = s.rel
    runs = s.data.get("runs", [])
    steps = "; ".join(f"{page.v(rel, 'runs', i, 'label')}: {page.v(rel, 'runs', i, 'steps_run')} updates"
                      for i in range(len(runs)) if page.has(rel, "runs", i, "steps_run"))
    shrunk = ("" if page.get(REPORT_FILE, "preset") == "full" else
              " This preset shrinks L below the paper's (the full preset uses the paper's length and steps).")
    page.caption(
        f"Mini-batch Adam against full-batch Adam on the same split and initialisation at d = "
        f"{page.v_or_dash(rel, 'd')}, L = {page.v_or_dash(rel, 'L')} ({_preset_phrase(page)}).{shrunk} "
        f"Updates run: {steps}. A mini-batch update sees only a batch of the domain's pairs, so it is given "
        "more updates than full batch for a comparable number of pairs seen.")


# ------------------------------------------------------------------------------------------- LLM figures


def _location_label(page: Page, rel: str, *keys) -> str:
    """'embeddings' for location index zero, else 'after block ℓ' with ℓ the location's index."""
    index = page.get(rel, *keys, "index")
    if index == 0:
        return "embeddings"
    return f"after block {page.v(rel, *keys, 'index')}" if index is not None else page.v(rel, *keys, "name")


def geometry_view(page: Page, s: Section) -> None:
    rel = s.rel
    rows = []
    for i in range(len(s.data.get("per_location", []))):
        loc = ("per_location", i)
        rows.append([_location_label(page, rel, *loc), page.v(rel, *loc, "name"), page.v(rel, *loc, "gap_ratio"),
                     f"{page.v(rel, *loc, 'gap_ratio_min')} – {page.v(rel, *loc, 'gap_ratio_max')}",
                     page.v_or_dash(rel, *loc, "gap_ratio_pooled"), page.v(rel, *loc, "erank_ratio"),
                     f"{page.v(rel, *loc, 'erank_ratio_min')} – {page.v(rel, *loc, 'erank_ratio_max')}",
                     page.v_or_dash(rel, *loc, "erank_ratio_pooled")])
    page.caption(
        f"High window {page.v(rel, 'high_window', 0)}–{page.v(rel, 'high_window', 1)} over low window "
        f"{page.v(rel, 'low_window', 0)}–{page.v(rel, 'low_window', 1)}; PCA over counts "
        f"{page.v(rel, 'pca_counts', 0)}–{page.v(rel, 'pca_counts', 1)}; seeds {page.values(rel, 'seeds')}. "
        "Figure 5's lines are the seed-mean ratios (the ratio per seed, then the mean; the seed range shaded). "
        "The pooled ratios (centroids over all seeds, one ratio) are what the toy-vs-LLM comparison uses; the "
        "two differ because a mean of ratios is not a ratio of means. At the embeddings every prompt's "
        "boundary token is the same, so there is no geometry (nan).")
    page.add(table(["location", "name", "gap ratio, seed-mean", "seed range", "gap ratio, pooled",
                    "effective-rank ratio, seed-mean", "seed range", "effective-rank ratio, pooled"], rows, left=2))


def _fractions(page: Page, rel: str) -> str:
    if not page.has(rel, "config", "fractions"):
        return ""
    sizes = (f"; rows {page.v(rel, 'config', 'split_sizes', 'train')} / "
             f"{page.v(rel, 'config', 'split_sizes', 'validation')} / {page.v(rel, 'config', 'split_sizes', 'test')}"
             if page.has(rel, "config", "split_sizes", "test") else "")
    return (f" (train / validation / test fractions {page.v(rel, 'config', 'fractions', 0)} / "
            f"{page.v(rel, 'config', 'fractions', 1)} / {page.v(rel, 'config', 'fractions', 2)}{sizes})")


def probe_view(page: Page, s: Section) -> None:
    rel = s.rel
    locs = s.data.get("locations", [])
    cols = ("alpha", "val_rounded_acc", "test_rounded_acc", "r2", "coef_norm", "control_test_rounded_acc",
            "selectivity")
    rows = []
    for i, loc in enumerate(locs):
        for j, fit in enumerate(loc.get("fits", [])):
            rows.append([_location_label(page, rel, "locations", i), page.v(rel, "locations", i, "fits", j, "seed")]
                        + [page.v(rel, "locations", i, "fits", j, c) if c in fit else "—" for c in cols])
    page.caption(
        "Protocol: per location and split seed, every α of the grid is fitted on the training rows, α is "
        f"selected by validation rounded accuracy and the selected probe is scored on the test rows{_fractions(page, rel)}. "
        f"The α grid: {page.values(rel, 'alphas', limit=3)}. Figure 7 bins the test accuracy by count.")
    best = s.data.get("best_location")
    if best is not None:
        index = next((i for i, loc in enumerate(locs) if loc.get("name") == best), None)
        label = _location_label(page, rel, "locations", index) if index is not None else page.v(rel, "best_location")
        page.add(f"<p>Best location by validation accuracy: {label} ({page.v(rel, 'best_location')}).</p>")
    page.add("<details><summary>Selected probe per location and split seed</summary>"
             + table(["location", "split seed", "α", "validation rounded accuracy", "test rounded accuracy", "R²",
                      "native norm", "control-task test accuracy", "selectivity"], rows) + "</details>")
    if page.has(rel, "behaviour", "accuracy"):
        page.add("<p>The model's own greedy answer (parsed by one rule: exactly one number in the answer, else "
                 f"unparsed, counted wrong) is exact on {page.v(rel, 'behaviour', 'accuracy')} of the prompts "
                 f"({page.v(rel, 'behaviour', 'parsed')} parse); Figure 7 draws it per count range beside the "
                 "probe. Selectivity is the probe's test accuracy minus that of the same probe family, with α "
                 "selected the same way, on the Hewitt–Liang control task (each count mapped to a fixed random "
                 "other count).</p>")


def sweep_view(page: Page, s: Section) -> None:
    rel = s.rel
    page.caption(
        f"At {page.v_or_dash(rel, 'location')}, one probe per α of the grid: its native Euclidean norm (in the "
        "activations' own coordinates) against its rounded accuracy on the held-out test rows, with no "
        f"selection{_fractions(page, rel)}. Colour is the relative ridge coefficient (α over the mean "
        "eigenvalue of the training design's Gram matrix); black stars are the unregularised "
        "(minimum-norm least-squares) probes, one per split seed.")


def patching_view(page: Page, s: Section) -> None:
    rel = s.rel
    rows = [[_location_label(page, rel, "locations", i)]
            + [page.v_or_dash(rel, "locations", i, k) for k in ("moved_to_source", "mean_shift", "mean_relative_shift",
                                                              "logprob_change", "parsed")]
            for i in range(len(s.data.get("locations", [])))]
    page.caption(
        "Each target prompt's boundary vector at one location is replaced by that of a prompt differing only in "
        "count (same seed, wording and token pair), and the forward continues. Only the boundary position is "
        "patched, so later blocks can still re-read the items: where answers follow the source is where the "
        f"count is committed. The model's clean accuracy on the targets: {page.v(rel, 'clean_accuracy')}.")
    page.add("<details><summary>Per location</summary>" + table(
        ["location", "answers moved to the source", "mean answer shift", "shift / (source − target)",
         "change of log p(correct), nats", "answers parsed"], rows) + "</details>")


def steering_view(page: Page, s: Section) -> None:
    rel = s.rel
    page.caption(
        f"At {page.v(rel, 'location')}, Δ·w/‖w‖² along the validation-selected ridge probe "
        f"w (native norm {page.v(rel, 'probe_norm')}) is added to the boundary vector, so the probe's read-out "
        "moves by exactly Δ; the grey line is a random direction of the same norm. The curve is the model's mean "
        f"answer shift; its clean accuracy on these prompts: {page.v(rel, 'clean_accuracy')}.")


def compare_view(page: Page, s: Section) -> None:
    rel = s.rel
    rows = []
    for i, r in enumerate(s.data.get("rows", [])):
        row = ("rows", i)
        if r.get("probe_norm") is not None:
            probe = (f"{page.v(rel, *row, 'probe_norm')} (test accuracy "
                     f"{page.v_or_dash(rel, *row, 'probe_norm_test_acc')})")
        else:
            probe = "not reached on the grid"
        own = (f"{page.v(rel, *row, 'readout_norm')} (passes the check: {page.v_or_dash(rel, *row, 'readout_passed')})"
               if r.get("readout_norm") is not None else "—")
        rows.append([page.v(rel, *row, "label"), page.v(rel, *row, "kind"), page.v(rel, *row, "gap_ratio"),
                     page.v(rel, *row, "erank_ratio"), page.v(rel, *row, "arc_angle"),
                     page.v_or_dash(rel, *row, "probe_best_acc"), page.v_or_dash(rel, *row, "probe_norm_at_best"),
                     probe, own])
    page.add(table(["source", "kind", "gap ratio, pooled", "effective-rank ratio, pooled", "endpoint angle (rad)",
                    "probe test accuracy (validation-selected α)", "its native norm",
                    "smallest native norm exact on validation rows", "toy's own read-out norm"], rows, left=2))
    fractions = (f" (train / validation / test {page.v(rel, 'probe', 'fractions', 0)} / "
                 f"{page.v(rel, 'probe', 'fractions', 1)} / {page.v(rel, 'probe', 'fractions', 2)}, split seed "
                 f"{page.v(rel, 'probe', 'split_seed')})" if page.has(rel, "probe", "fractions") else "")
    page.caption(
        "Ratios here are pooled over seeds (centroids over all seeds), not Figure 5's seed-mean. The endpoint "
        "angle is seen from the origin between the centroids of the first and last count of the span "
        f"{page.values(rel, 'arc_counts')}, not Figure 2(b)'s arc angle. Probes: one ridge path per source"
        f"{fractions}, relative ridge coefficients {page.values(rel, 'probe', 'rel_alphas', limit=3)}; the "
        "accuracy column is the validation-selected probe scored on the test rows; the norm column is the "
        "smallest norm on the path whose probe counts rounding-exactly on the validation rows, “not reached” "
        "when no coefficient of the grid gets there. The toy's own read-out is the construction's, certified "
        "by the full-domain check.")
    page.caption(
        "The toy centroids average h(n, m) over every distractor count m, as the LLM's average over prompts, so "
        "the toy panels need not look like Figure 1's letter-free slice (linear and softmax zig-zag where the "
        "distractors move the centroid); the learned post-LN construction reads its arc through a gain with "
        "one non-zero coordinate, so its h lies on a line (endpoint angle zero).")
    closest = "".join(f"<li>{page.k(rel, 'closest_toy', k)} resembles toy {page.v(rel, 'closest_toy', k)}</li>"
                      for k in (s.data.get("closest_toy") or {}))
    if closest:
        page.add(f"<p>Nearest toy by gap and effective-rank ratios:</p><ul>{closest}</ul>")


# ------------------------------------------------------------------------------------------- the page


def _stage_record(page: Page, name: str) -> tuple[int | None, dict | None]:
    for i, rec in enumerate((page.load(REPORT_FILE) or {}).get("stages", [])):
        if rec.get("stage") == name:
            return i, rec
    return None, None


def _stage_status(page: Page, name: str) -> str | None:
    """The failure line of a stage that is not done (None when done)."""
    i, rec = _stage_record(page, name)
    if rec is None:
        return '<p class="failed">This stage is not part of the run.</p>'
    if rec.get("status") == "done":
        return None
    reason = f": {page.v(REPORT_FILE, 'stages', i, 'reason')}" if rec.get("reason") else ""
    return (f'<p class="failed">Stage {page.v(REPORT_FILE, "stages", i, "stage")} '
            f'{page.v(REPORT_FILE, "stages", i, "status")}{reason}</p>')


def _figures(page: Page, name: str, title: str) -> None:
    """Each PNG the stage wrote, opening at full resolution, with its PDF; then links to its data files."""
    rel = f"{name}/{STAGE_FILE}"
    files = page.get(rel, "files", default=[])
    for i, f in enumerate(files):
        if not f.endswith(".png"):
            continue
        png = html.escape(f"{name}/{f}")
        pdf = f[:-4] + ".pdf"
        pdf_link = (f' · <a href="{html.escape(name + "/" + pdf)}">PDF</a>' if pdf in files else "")
        page.add(f'<figure><a href="{png}"><img src="{png}" alt="{html.escape(title)}" loading="lazy"></a>'
                 f'<figcaption>{page.v(rel, "files", i)}: <a href="{png}">full-size PNG</a>{pdf_link}'
                 "</figcaption></figure>")
    links = [f'<a href="{html.escape(name + "/" + f)}">{page.v(rel, "files", i)}</a>'
             for i, f in enumerate(files) if not f.endswith((".png", ".pdf"))]
    if links:
        page.add('<p class="muted">Data: ' + ", ".join(links) + "</p>")


def _section(page: Page, stage: StageLike) -> None:
    page.add(f"<h2>{html.escape(stage.title)}</h2>")
    status = _stage_status(page, stage.name)
    if status:
        page.add(status)
        return
    rel = f"{stage.name}/{stage.outputs[0]}" if stage.outputs else None
    data = page.load(rel) if rel else None
    try:
        result = stage.result_type.from_dict(data) if stage.result_type is not None and data is not None else data
    except (KeyError, TypeError, ValueError, UsageError) as exc:
        page.add(f'<p class="failed">{html.escape(rel)} does not hold this stage\'s result '
                 f"({html.escape(exc.__class__.__name__)}); its keys:</p>" + generic_table(page, rel))
        result = None
    if result is not None and stage.view is not None:
        stage.view(page, Section(stage, rel, data, result))
    _figures(page, stage.name, stage.title)


def _reading_notes(page: Page) -> None:
    """What holds for the whole page: sizes, location labels, the two gap ratios, probe protocols."""
    page.add('<h2>Reading this page</h2><ul class="caveats">'
             f"<li>Sizes are those of the {_preset_phrase(page)} (the full preset is the paper's); each table's "
             "caption says what limits it.</li>"
             "<li>Locations: the embeddings are the input to the first block; “after block ℓ” is the output of "
             "block ℓ, counting blocks from one. The capture's names count from zero, so "
             "<code>blocks.l.hook_resid_post</code> is shown as after block ℓ with ℓ one more than l.</li>"
             "<li>Gap ratio: Figure 5 and its table show the seed-mean ratio (per seed, then averaged); the "
             "toy-vs-LLM comparison shows the pooled ratio (centroids over all seeds). Both are labelled where "
             "they appear.</li>"
             "<li>Probe accuracies: Figure 7 and the probe table are validation-selected and test-scored; "
             "Figure 8 shows every α's test accuracy without selection; the comparison shows the validation-"
             "selected probe's test accuracy and the smallest norm exact on the validation rows.</li>"
             "<li>Definitions: <code>docs/definitions.md</code> in the repository.</li></ul>")


def _header(page: Page) -> None:
    rel = REPORT_FILE
    s = page.load(rel)
    page.add("<h1>countlens report</h1>")
    page.add(f"<p>Preset {page.v(rel, 'preset')}, model {page.v(rel, 'model')}, made "
             f"{page.v_or_dash(rel, 'provenance', 'created_utc')} by "
             f"<code>{page.v_or_dash(rel, 'provenance', 'command')}</code>.</p>")
    rows = []
    for i, rec in enumerate(s.get("stages", [])):
        reused = " (reused)" if rec.get("reused") else ""
        cls = "" if rec.get("status") == "done" else ' class="failed"'
        rows.append([page.v(rel, "stages", i, "stage"), page.v_or_dash(rel, "stages", i, "title"),
                     f"<span{cls}>{page.v(rel, 'stages', i, 'status')}</span>{reused}",
                     page.v_or_dash(rel, "stages", i, "wall_s"), page.v_or_dash(rel, "stages", i, "cpu_s"),
                     page.v(rel, "stages", i, "reason") if rec.get("reason") else ""])
    page.add("<h2>Stages</h2>" + table(["stage", "what", "status", "wall time (s)", "CPU time (s)", "note"], rows,
                                      left=(0, 1, 2, 5)))


def _configuration(page: Page) -> None:
    rel = REPORT_FILE
    prov = (page.load(rel) or {}).get("provenance", {})
    sizes = prov.get("config", {}).get("sizes", {})
    crows = [[page.k(rel, "provenance", "config", "sizes", k),
              _config_cell(page, rel, ["provenance", "config", "sizes", k], v)] for k, v in sizes.items()]
    vrows = [[page.k(rel, "provenance", "versions", k), page.v(rel, "provenance", "versions", k)]
             for k in prov.get("versions", {})]
    page.add("<h2>Configuration and versions</h2><p>Each stage's configuration (the calls that rerun each stage "
             "are listed below).</p>" + table(["stage", "configuration"], crows, left=2)
             + table(["package", "version"], vrows) + _commands(page))


def _config_cell(page: Page, rel: str, path: list, value: Any) -> str:
    if isinstance(value, list) and not all(_scalar(x) for x in value):
        return " | ".join(_config_cell(page, rel, path + [i], x) for i, x in enumerate(value))
    if isinstance(value, list):
        return page.values(rel, *path) or "(empty)"
    if isinstance(value, dict):
        return "; ".join(f"{page.k(rel, *path, k)} = {_config_cell(page, rel, path + [k], v)}"
                         for k, v in value.items())
    return page.v(rel, *path)


def _commands(page: Page) -> str:
    """What each finished stage ran, for rerunning one by hand."""
    rel = REPORT_FILE
    items = [f"<li><code>{page.v(rel, 'stages', i, 'commands', j)}</code></li>"
             for i, rec in enumerate((page.load(rel) or {}).get("stages", []))
             for j, _ in enumerate(rec.get("commands", []))]
    return f"<details><summary>Calls</summary><ul>{''.join(items)}</ul></details>" if items else ""


def render_index(out: Path, stages: Sequence[StageLike]) -> str:
    """The report page for the folder ``out`` (which holds ``reproduce.json`` and the stage folders)."""
    page = Page(Path(out))
    if page.load(REPORT_FILE) is None:
        raise FileNotFoundError(f"{out}/{REPORT_FILE} is missing; run countlens reproduce")
    _header(page)
    _reading_notes(page)
    for stage in stages:
        if stage.view is not None:
            _section(page, stage)
    _configuration(page)
    body = "\n".join(page.parts)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>countlens report</title>"
            f"{_STYLE}</head>\n<body><main>\n{body}\n</main>{_SCRIPT}\n</body></html>\n")


def write_index(out: Path, stages: Sequence[StageLike]) -> Path:
    """Write ``out/index.html`` atomically."""
    return write_text_atomic(Path(out) / "index.html", render_index(out, stages))


__all__ = ["Page", "Section", "StageLike", "format_value", "lookup", "table", "generic_table", "render_index",
           "write_index", "rates_view", "lcap_view", "table2_view", "table3_view", "figure1_view", "figure2_view",
           "figure3_view", "figure4_view", "geometry_view", "probe_view", "sweep_view",
           "compare_view"]
