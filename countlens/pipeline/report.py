"""``OUT/index.html`` for ``countlens reproduce``, built only from the JSON files the stages wrote.

The page is laid out from the stages it is given, in their order: each stage's heading is its title, its
result file is read back through its result type's ``from_dict``, and its ``view`` (each room's, beside
its figures) writes its tables, captions and caveats into a :class:`countlens.core.report.Page`; its
figures are the PNGs its ``stage.json`` lists, each a link to the full-resolution PNG and PDF. An inline
script counts images that fail to load into ``<body data-broken-images>`` and records the page's and the
window's widths (``data-scroll-width``, ``data-viewport-width``), so a headless browser can check the page.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from countlens.core.errors import UsageError
from countlens.core.io import write_text_atomic
from countlens.core.report import (
    REPORT_FILE,
    STAGE_FILE,
    Page,
    Section,
    StageLike,
    generic_table,
    is_scalar,
    table,
)
from countlens.pipeline.tasks import TASKS_DIR, TASKS_FILE, tasks_section

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
    rel = f"{stage.name}/{stage.result_type.FILE}"
    data = page.load(rel)
    try:
        result = stage.result_type.from_dict(data) if data is not None else None
    except (KeyError, TypeError, ValueError, UsageError) as exc:
        page.add(f'<p class="failed">{html.escape(rel)} does not hold this stage\'s result '
                 f"({html.escape(exc.__class__.__name__)}); its keys:</p>" + generic_table(page, rel))
        result = None
    if result is not None and stage.view is not None:
        stage.view(page, Section(stage, rel, result))
    _figures(page, stage.name, stage.title)


def _reading_notes(page: Page) -> None:
    """What holds for the whole page: sizes, location labels, the two gap ratios, probe protocols."""
    page.add('<h2>Reading this page</h2><ul class="caveats">'
             f"<li>Sizes are those of the {page.preset_phrase()} (the full preset is the paper's); each table's "
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
             "<li>The model's answers, three read-outs: the greedy answer (what the model says; on small models "
             "that give the same answer, often “one”, to most prompts it is flat, and shows nothing of what the "
             "model holds); the answer as a distribution over the candidate counts, each teacher-forced over all "
             "its tokens (the expected count and the correct count's rank: informative on weak models, but a "
             "preference, not an answer the model gives); and the normalised logit difference of patching and "
             "ablation (one where the clean run's preference is restored, zero where none of it is; not defined "
             "where the clean and corrupted runs barely differ, so those pairs are counted, not divided by).</li>"
             "<li>Probes and lenses read what is linearly there, not what the model uses: a count a probe reads "
             "and the answer misses is the gap that patching, steering, the heads and the lenses locate, never a "
             "proof that the model computes it there.</li>"
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


def _tasks(page: Page) -> None:
    """The tasks side by side (``reproduce --tasks``), where the report has them."""
    rel = f"{TASKS_DIR}/{TASKS_FILE}"
    if page.load(rel) is None:
        return
    page.add("<h2>Tasks side by side</h2>")
    runs = (page.load(REPORT_FILE) or {}).get("tasks", [])
    for i, run in enumerate(runs):
        if run.get("status") != "done":
            page.add(f'<p class="failed">Task {page.v(REPORT_FILE, "tasks", i, "task")} '
                     f'{page.v(REPORT_FILE, "tasks", i, "status")}: {page.v(REPORT_FILE, "tasks", i, "reason")}</p>')
    tasks_section(page, rel, prefix=f"{TASKS_DIR}/")


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
    if isinstance(value, list) and not all(is_scalar(x) for x in value):
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
    _tasks(page)
    _configuration(page)
    body = "\n".join(page.parts)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>countlens report</title>"
            f"{_STYLE}</head>\n<body><main>\n{body}\n</main>{_SCRIPT}\n</body></html>\n")


def write_index(out: Path, stages: Sequence[StageLike]) -> Path:
    """Write ``out/index.html`` atomically."""
    return write_text_atomic(Path(out) / "index.html", render_index(out, stages))


__all__ = ["render_index", "write_index"]
