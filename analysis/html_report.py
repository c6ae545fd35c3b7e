"""``OUT/index.html`` for ``countlens reproduce``, built only from the JSON files beside it.

Every value shown is a ``<span class="v" data-json=FILE data-key=[...]>`` read from ``FILE`` at that key
path (formatted by :func:`format_value`), and every key label a ``<span class="k">`` naming the key;
all other text is fixed prose with no numbers other than figure and table numbers. Images are relative
links to the PNGs in the stage folders; an inline script counts images that fail to load into
``<body data-broken-images>``, so a headless browser can check the page.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from countlens.io import write_text_atomic

REPORT_FILE = "reproduce.json"
STAGE_FILE = "stage.json"

# (section heading, stage, what it shows) in the paper's order. Headings hold the only fixed numbers.
FIGURES = (
    ("Figure 1", "toy-figure1", "Boundary representations on space-only inputs (no distractors), one panel per variant."),
    ("Figure 2", "toy-figure2", "What each read-out costs: read-out norms, arc of the count representations, "
                                "smallest winning score gap, and supported length under caps."),
    ("Figure 3", "toy-figure3", "Training dynamics of the unnormalised softmax model over seeds."),
    ("Figure 4", "toy-figure4", "Mini-batch Adam against full-batch Adam."),
    ("Figures 5 and 6", "geometry", "Layerwise high/low-count gap ratio (blue) and effective-rank ratio (red) "
                                    "with the seed range shaded, and PCA of the count centroids at four "
                                    "locations (each panel its own basis)."),
    ("Figure 7", "probe", "Rounded exact accuracy of the validation-selected ridge probe, binned by count."),
    ("Figure 8", "probe-sweep", "Probe native norm against held-out rounded accuracy along the ridge path; "
                                "colour is the relative ridge coefficient, black stars the unregularised fits."),
    ("Toy vs LLM", "compare", "The same geometry metrics and probe cost on toy boundary representations and "
                              "the model's residual stream."),
)

_SCRIPT = """<script>
window.addEventListener('load', function () {
  var broken = 0;
  document.querySelectorAll('img').forEach(function (im) { if (!im.complete || im.naturalWidth === 0) broken++; });
  document.body.setAttribute('data-broken-images', String(broken));
  document.body.setAttribute('data-images', String(document.images.length));
});
</script>"""

_STYLE = """<style>
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
td.l, th.l { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; }
.failed { color: #b00; } .muted { color: #777; font-size: 0.85em; }
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


class _Page:
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

    def v(self, rel: str, *keys) -> str:
        """A value span: the value at ``keys`` in JSON file ``rel``."""
        value = lookup(self.load(rel), list(keys))
        return (f'<span class="v" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(list(keys)))}">'
                f"{html.escape(format_value(value))}</span>")

    def k(self, rel: str, *keys) -> str:
        """A key-label span: the last key of the path (a dict key in ``rel``)."""
        return (f'<span class="k" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(list(keys)))}">'
                f"{html.escape(str(keys[-1]))}</span>")

    def add(self, text: str) -> None:
        self.parts.append(text)


def _table(header: list[str], rows: list[list[str]], left: int | tuple[int, ...] = 1) -> str:
    """An HTML table; cells are already-rendered HTML; the first ``left`` columns (or those listed) align
    left."""
    lefts = set(range(left)) if isinstance(left, int) else set(left)
    head = "".join(f'<th class="{"l" if i in lefts else ""}">{h}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i in lefts else ""}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _scalar(x: Any) -> bool:
    return x is None or isinstance(x, (int, float, str, bool))


def _generic(page: _Page, rel: str, obj: Any, path: list, rows: list, depth: int = 0) -> None:
    """Flatten a JSON object into (key path, value) rows; lists of scalars on one row (first 12 shown)."""
    if len(rows) >= 80 or depth > 5:
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "provenance" and depth == 0:
                continue
            _generic(page, rel, value, path + [key], rows, depth + 1)
    elif isinstance(obj, list) and obj and all(_scalar(x) for x in obj):
        cells = ", ".join(page.v(rel, *path, i) for i in range(min(len(obj), 12)))
        rows.append([_path_label(page, rel, path), cells + (" …" if len(obj) > 12 else "")])
    elif isinstance(obj, list):
        for i, value in enumerate(obj[:12]):
            _generic(page, rel, value, path + [i], rows, depth + 1)
    elif _scalar(obj):
        rows.append([_path_label(page, rel, path), page.v(rel, *path)])


def _path_label(page: _Page, rel: str, path: list) -> str:
    labels = []
    for i, key in enumerate(path):
        labels.append(page.k(rel, *path[:i + 1]) if isinstance(key, str) else "·")
    return " / ".join(labels)


def generic_table(page: _Page, rel: str) -> str:
    obj = page.load(rel)
    rows: list = []
    _generic(page, rel, obj, [], rows)
    return _table(["key", "value"], rows) if rows else ""


def _variants_table(page: _Page, rel: str, index_key: str) -> str:
    """``{"variants": {V: {index_key: [...], other: [...], scalar: x}}}`` as one row per (variant, index)."""
    obj = page.load(rel)
    variants = obj.get("variants") if isinstance(obj, dict) else None
    if not isinstance(variants, dict) or not all(isinstance(v, dict) and isinstance(v.get(index_key), list)
                                                  for v in variants.values()):
        return generic_table(page, rel)
    html_parts = []
    for name, entry in variants.items():
        idx = entry[index_key]
        cols = [k for k, v in entry.items() if k != index_key and isinstance(v, list) and len(v) == len(idx)
                and all(_scalar(x) for x in v)]
        scalars = [k for k, v in entry.items() if _scalar(v)]
        rows = [[page.v(rel, "variants", name, index_key, i)] + [page.v(rel, "variants", name, c, i) for c in cols]
                for i in range(len(idx))]
        header = [page.k(rel, "variants", name, index_key)] + [page.k(rel, "variants", name, c) for c in cols]
        extra = "; ".join(f"{page.k(rel, 'variants', name, s)} = {page.v(rel, 'variants', name, s)}"
                          for s in scalars)
        html_parts.append(f"<h4>{page.k(rel, 'variants', name)}</h4>" + (f"<p>{extra}</p>" if extra else "")
                          + _table(header, rows))
    return "".join(html_parts)


def _rates_table(page: _Page, rel: str) -> str:
    """Table 1 from ``{"variants": {V: {"L": [...], "b_min": [...], "slope": s, "claimed": c}}}``: one row
    per variant, one column per length (a dash where the variant has no value at that length)."""
    obj = page.load(rel)
    variants = obj.get("variants") if isinstance(obj, dict) else None
    if not isinstance(variants, dict) or not all(isinstance(v, dict) and isinstance(v.get("L"), list)
                                                  and isinstance(v.get("b_min"), list) for v in variants.values()):
        return generic_table(page, rel)
    where: dict[Any, tuple[str, int]] = {}
    for name, entry in variants.items():
        for i, L in enumerate(entry["L"]):
            where.setdefault(L, (name, i))
    Ls = sorted(where, key=lambda x: float(x))
    header = ["variant", "claimed exponent", "fitted slope", "slope at large L"] + [
        "B_min at L = " + page.v(rel, "variants", where[L][0], "L", where[L][1]) for L in Ls]
    rows = []
    for name, entry in variants.items():
        index = {L: i for i, L in enumerate(entry["L"])}
        cells = [page.v(rel, "variants", name, "b_min", index[L]) if L in index and index[L] < len(entry["b_min"])
                 else "—" for L in Ls]
        rows.append([page.k(rel, "variants", name),
                     page.v(rel, "variants", name, "claimed") if "claimed" in entry else "—",
                     page.v(rel, "variants", name, "slope") if "slope" in entry else "—",
                     # the asymptotic rate: small L distorts the post-LN fits (Table 1 claims rates in L)
                     page.v(rel, "variants", name, "slope_L_ge_100") if "slope_L_ge_100" in entry else "—",
                     *cells])
    return _table(header, rows)


def _table2(page: _Page, rel: str) -> str:
    """Table 2 from ``{"rows": [{"d", "L", "steps", "test_exact_accuracy": {"mean", "min", "max"},
    "full_domain_worst_error": {...}}]}``, in the paper's layout: mean [min, max] over seeds."""
    obj = page.load(rel)
    keys = ("test_exact_accuracy", "full_domain_worst_error")
    rows_in = obj.get("rows") if isinstance(obj, dict) else None
    if not isinstance(rows_in, list) or not all(isinstance(r, dict) and all(isinstance(r.get(k), dict) for k in keys)
                                                and all(c in r for c in ("d", "L", "steps")) for r in rows_in):
        return generic_table(page, rel)

    def cell(i: int, key: str) -> str:
        return (f"{page.v(rel, 'rows', i, key, 'mean')} [{page.v(rel, 'rows', i, key, 'min')}, "
                f"{page.v(rel, 'rows', i, key, 'max')}]")

    rows = [[page.v(rel, "rows", i, "d"), page.v(rel, "rows", i, "L"), page.v(rel, "rows", i, "steps"),
             cell(i, keys[0]), cell(i, keys[1])] for i in range(len(rows_in))]
    return _table(["dimension d", "maximum count L", "steps", "test exact accuracy", "full-domain worst error"],
                  rows, left=0)


def _probe_table(page: _Page, rel: str) -> str:
    """Validation-selected probe per location and split seed: α, accuracies, R², native norm."""
    obj = page.load(rel)
    locs = obj.get("locations") if isinstance(obj, dict) else None
    cols = ("alpha", "val_rounded_acc", "test_rounded_acc", "r2", "coef_norm")
    if not isinstance(locs, list) or not all(isinstance(loc, dict) and isinstance(loc.get("fits"), list)
                                             for loc in locs):
        return generic_table(page, rel)
    rows = []
    for i, loc in enumerate(locs):
        for j, fit in enumerate(loc["fits"]):
            rows.append([page.v(rel, "locations", i, "name"), page.v(rel, "locations", i, "fits", j, "seed")]
                        + [page.v(rel, "locations", i, "fits", j, c) if c in fit else "—" for c in cols])
    best = f"<p>Best location by validation accuracy: {page.v(rel, 'best_location')}.</p>" \
        if "best_location" in obj else ""
    return best + ("<details><summary>Selected probe per location and split seed</summary>"
                   + _table(["location", "split seed", "alpha", "validation rounded accuracy",
                             "test rounded accuracy", "R²", "native norm"], rows) + "</details>")


def _stage_record(page: _Page, stage: str) -> tuple[int | None, dict | None]:
    summary = page.load(REPORT_FILE) or {}
    for i, rec in enumerate(summary.get("stages", [])):
        if rec.get("stage") == stage:
            return i, rec
    return None, None


def _stage_status(page: _Page, stage: str) -> str | None:
    """The failure line of a stage that is not done (None when done)."""
    i, rec = _stage_record(page, stage)
    if rec is None:
        return '<p class="failed">This stage is not part of the run.</p>'
    if rec.get("status") == "done":
        return None
    reason = f": {page.v(REPORT_FILE, 'stages', i, 'reason')}" if rec.get("reason") else ""
    return (f'<p class="failed">Stage {page.v(REPORT_FILE, "stages", i, "stage")} '
            f'{page.v(REPORT_FILE, "stages", i, "status")}{reason}</p>')


def _files(page: _Page, stage: str) -> tuple[list[str], str]:
    """(PNG paths relative to OUT, HTML list of the stage's data files as links)."""
    rel = f"{stage}/{STAGE_FILE}"
    record = page.load(rel) or {}
    files = record.get("files", [])
    pngs = [f"{stage}/{f}" for f in files if f.endswith(".png")]
    links = [f'<a href="{html.escape(stage + "/" + f)}">{page.v(rel, "files", i)}</a>'
             for i, f in enumerate(files) if not f.endswith(".png")]
    return pngs, ("<p class=\"muted\">Data and vector figures: " + ", ".join(links) + "</p>") if links else ""


def _section_figures(page: _Page, heading: str, stage: str, text: str) -> None:
    page.add(f"<h2>{heading}</h2><p>{html.escape(text)}</p>")
    status = _stage_status(page, stage)
    if status:
        page.add(status)
        return
    pngs, links = _files(page, stage)
    for png in pngs:
        page.add(f'<p><img src="{html.escape(png)}" alt="{html.escape(heading)}"></p>')
    if stage == "geometry":
        page.add(_geometry_table(page))
    if stage == "compare":
        page.add(_compare_table(page))
    if stage == "probe":
        page.add(_probe_table(page, "probe/probes.json"))
    page.add(links)


def _geometry_table(page: _Page) -> str:
    rel = "geometry/geometry.json"
    g = page.load(rel)
    if not isinstance(g, dict):
        return ""
    rows = []
    for i, _ in enumerate(g.get("per_location", [])):
        rows.append([page.v(rel, "per_location", i, "index"), page.v(rel, "per_location", i, "name"),
                     page.v(rel, "per_location", i, "gap_ratio"),
                     f"{page.v(rel, 'per_location', i, 'gap_ratio_min')} – {page.v(rel, 'per_location', i, 'gap_ratio_max')}",
                     page.v(rel, "per_location", i, "erank_ratio"),
                     f"{page.v(rel, 'per_location', i, 'erank_ratio_min')} – {page.v(rel, 'per_location', i, 'erank_ratio_max')}"])
    windows = (f"<p>High window {page.v(rel, 'high_window', 0)}–{page.v(rel, 'high_window', 1)} over low window "
               f"{page.v(rel, 'low_window', 0)}–{page.v(rel, 'low_window', 1)}; PCA over counts "
               f"{page.v(rel, 'pca_counts', 0)}–{page.v(rel, 'pca_counts', 1)}.</p>")
    return windows + _table(["location", "name", "gap ratio (mean)", "seed range", "effective-rank ratio (mean)",
                             "seed range"], rows, left=2)


def _compare_table(page: _Page) -> str:
    rel = "compare/compare.json"
    c = page.load(rel)
    if not isinstance(c, dict):
        return ""
    rows = []
    for i, r in enumerate(c.get("rows", [])):
        if r.get("probe_norm") is not None:
            probe = page.v(rel, "rows", i, "probe_norm")
        else:
            probe = (f"not reached (best accuracy {page.v(rel, 'rows', i, 'probe_best_acc')} at norm "
                     f"{page.v(rel, 'rows', i, 'probe_norm_at_best')})")
        own = (f"{page.v(rel, 'rows', i, 'readout_norm')} (passes check: {page.v(rel, 'rows', i, 'readout_passed')})"
               if r.get("readout_norm") is not None else "—")
        rows.append([page.v(rel, "rows", i, "label"), page.v(rel, "rows", i, "kind"),
                     page.v(rel, "rows", i, "gap_ratio"), page.v(rel, "rows", i, "erank_ratio"),
                     page.v(rel, "rows", i, "arc_angle"), probe, own])
    closest = "".join(f"<li>{page.k(rel, 'closest_toy', k)} resembles toy {page.v(rel, 'closest_toy', k)}</li>"
                      for k in (c.get("closest_toy") or {}))
    return (_table(["source", "kind", "gap ratio", "effective-rank ratio", "arc angle (rad)",
                    "ridge-probe norm for rounding-exact held-out accuracy",
                    "toy's own read-out norm"], rows, left=2)
            + (f"<ul>{closest}</ul>" if closest else ""))


def _tables(page: _Page) -> None:
    page.add("<h2>Table 1</h2><p>Measured B_min(L) of each variant's construction, the fitted log-log slope "
             "over the whole grid and over its large lengths only (the claimed rates are asymptotic), next to "
             "the claimed exponent, and L_cap(d) of bare pre-LN.</p>")
    for stage, rel in (("toy-rates", "toy-rates/rates.json"), ("toy-lcap", "toy-lcap/lcap.json")):
        status = _stage_status(page, stage)
        if status:
            page.add(status)
        elif stage == "toy-rates":
            page.add(_rates_table(page, rel))
        else:
            page.add(_lcap_table(page, rel))
    page.add("<h2>Table 2</h2><p>Softmax without LayerNorm trained from random initialisation: held-out "
             "exact accuracy and full-domain worst error over seeds.</p>")
    status = _stage_status(page, "toy-table2")
    page.add(status or _table2(page, "toy-table2/table2.json"))
    page.add("<h2>Table 3</h2><p>Largest length passing the full-domain check under a per-vector cap B: "
             "attained by training, and guaranteed by the constructions.</p>")
    status = _stage_status(page, "toy-table3")
    page.add(status or _variants_table(page, "toy-table3/table3.json", "B"))


def _lcap_table(page: _Page, rel: str) -> str:
    obj = page.load(rel)
    if isinstance(obj, dict) and isinstance(obj.get("d"), list) and isinstance(obj.get("l_cap"), list):
        rows = [[page.v(rel, "d", i), page.v(rel, "l_cap", i)] for i in range(len(obj["d"]))]
        return _table([page.k(rel, "d"), page.k(rel, "l_cap")], rows, left=0)
    return generic_table(page, rel)


def _header(page: _Page) -> None:
    rel = REPORT_FILE
    s = page.load(rel)
    page.add("<h1>countlens report</h1>")
    page.add(f"<p>Preset {page.v(rel, 'preset')}, model {page.v(rel, 'model')}, made "
             f"{page.v(rel, 'provenance', 'created_utc')} by <code>{page.v(rel, 'provenance', 'command')}</code>.</p>")
    rows = []
    for i, rec in enumerate(s.get("stages", [])):
        wall = page.v(rel, "stages", i, "wall_s") if "wall_s" in rec else "—"
        cpu = page.v(rel, "stages", i, "cpu_s") if "cpu_s" in rec else "—"
        reused = " (reused)" if rec.get("reused") else ""
        note = page.v(rel, "stages", i, "reason") if rec.get("reason") else ""
        cls = "" if rec.get("status") == "done" else ' class="failed"'
        rows.append([page.v(rel, "stages", i, "stage"), page.v(rel, "stages", i, "title"),
                     f"<span{cls}>{page.v(rel, 'stages', i, 'status')}</span>{reused}", wall, cpu, note])
    page.add("<h2>Stages</h2>" + _table(["stage", "what", "status", "wall time (s)", "CPU time (s)", "note"], rows,
                                       left=(0, 1, 2, 5)))
    versions = s.get("provenance", {}).get("versions", {})
    vrows = [[page.k(rel, "provenance", "versions", k), page.v(rel, "provenance", "versions", k)] for k in versions]
    sizes = s.get("provenance", {}).get("config", {}).get("sizes", {})
    crows = [[page.k(rel, "provenance", "config", "sizes", k), _list_or_value(page, rel, ["provenance", "config",
                                                                                       "sizes", k], v)]
             for k, v in sizes.items()]
    page.add("<h2>Configuration and versions</h2><p>Extra arguments of each stage's command "
             "(the full commands are listed below).</p>" + _table(["stage", "arguments"], crows, left=2)
             + _table(["package", "version"], vrows) + _commands(page))


def _list_or_value(page: _Page, rel: str, path: list, value: Any) -> str:
    if isinstance(value, list):
        return " ".join(page.v(rel, *path, i) for i in range(len(value))) or "(the command's own defaults)"
    if isinstance(value, dict):
        return ", ".join(f"{page.k(rel, *path, k)} = {page.v(rel, *path, k)}" for k in value)
    return page.v(rel, *path)


def _commands(page: _Page) -> str:
    """Every command each finished stage ran, for rerunning one by hand."""
    rel = REPORT_FILE
    items = []
    for i, rec in enumerate((page.load(rel) or {}).get("stages", [])):
        for j, _ in enumerate(rec.get("commands", [])):
            items.append(f"<li><code>{page.v(rel, 'stages', i, 'commands', j)}</code></li>")
    return f"<details><summary>Commands</summary><ul>{''.join(items)}</ul></details>" if items else ""


def render_index(out: Path) -> str:
    """The report page for the folder ``out`` (which holds ``reproduce.json`` and the stage folders)."""
    page = _Page(Path(out))
    if page.load(REPORT_FILE) is None:
        raise FileNotFoundError(f"{out}/{REPORT_FILE} is missing; run countlens reproduce")
    _header(page)
    _tables(page)
    for heading, stage, text in FIGURES:
        _section_figures(page, heading, stage, text)
    body = "\n".join(page.parts)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>countlens report</title>"
            f"{_STYLE}</head>\n<body>\n{body}\n{_SCRIPT}\n</body></html>\n")


def write_index(out: Path) -> Path:
    """Write ``out/index.html`` atomically."""
    return write_text_atomic(Path(out) / "index.html", render_index(out))


__all__ = ["FIGURES", "format_value", "lookup", "render_index", "write_index"]
