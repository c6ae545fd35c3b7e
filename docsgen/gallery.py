"""The figure gallery: one page per experiment the registry declares (:mod:`countlens.core.registry`), made
from the declaration itself — title, stage, what it reads, its result type and files, its sizes at the three
presets, the command and the Python call — with the pictures a report folder holds for it and the reading
notes of ``docs/gallery/notes/<stage>.md`` (what it shows, how to read it, what the theory predicts).

A new experiment gets its page from its declaration alone (a test checks that every declared one has a
page); only its reading notes are written by hand.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

NOTES = Path(__file__).resolve().parents[1] / "docs" / "gallery" / "notes"


def experiments() -> list:
    """The declared experiments, in report order."""
    from countlens.pipeline.experiments import experiments as declared

    return declared()


def _upstream(experiment, by_name: dict) -> list[str]:
    """The stages ``experiment`` needs, itself last (what it reads, transitively), in report order."""
    seen: dict[str, Any] = {}

    def visit(e):
        for stage in e.reads.values():
            if stage not in seen:
                visit(by_name[stage])
        seen[e.name] = e

    visit(experiment)
    return [e.name for e in sorted(seen.values(), key=lambda e: (e.order, e.name))]


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def _fields(config: Any, prefix: str = "") -> dict[str, Any]:
    """A config's fields by dotted name (nested configs flattened)."""
    out: dict[str, Any] = {}
    if config is None:
        return out
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(_fields(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def sizes_table(experiment) -> list[str]:
    """The config fields that differ between the presets, one row each (the sizes the presets trade)."""
    placeholders = {field: f"<{stage}>" for field, stage in experiment.reads.items()}
    configs = {}
    for preset in ("test", "quick", "full"):
        try:
            configs[preset] = _fields(experiment.preset(preset, **placeholders))
        except Exception:  # noqa: BLE001 - a preset that needs a real input: shown as not tabulated
            configs[preset] = {}
    names = list(dict.fromkeys(k for c in configs.values() for k in c))
    differ = [n for n in names if len({repr(c.get(n, "—")) for c in configs.values()}) > 1]
    if not names:
        return []
    if not differ:
        return ["The three presets run it at the same settings.", ""]
    rows = ["| setting | test | quick (`make demo`) | full (the paper's) |", "|---|---|---|---|"]
    for n in differ:
        cells = [(_short(c[n]) if n in c else ("no stage" if not c else "—")) for c in configs.values()]
        rows.append(f"| `{n}` | " + " | ".join(f"`{v}`" if v not in ("—", "no stage") else v for v in cells)
                    + " |")
    return [*rows, ""]


def page(experiment, by_name: dict, report: Path | None) -> tuple[str, dict[str, bytes]]:
    """The gallery page of ``experiment`` (Markdown) and its pictures (file name -> PNG bytes)."""
    e = experiment
    stage = report / e.name if report is not None else None
    record = {}
    if stage is not None and (stage / "stage.json").is_file():
        record = json.loads((stage / "stage.json").read_text(encoding="utf-8"))
    pictures, images = _pictures(e, stage, _report_model(report))
    lines = [f"# {e.title}", "", *pictures, "## What it shows and how to read it", "", *_notes(e)]
    lines += _run_it(e, by_name, record)
    lines += ["## Sizes at each preset", ""]
    lines += sizes_table(e) or ["*Its sizes follow the stages it reads.*", ""]
    lines += _files(e, record)
    return "\n".join(lines), images


def _pictures(e, stage: Path | None, model: str | None) -> tuple[list[str], dict[str, bytes]]:
    """The page's pictures (Markdown lines, file name -> PNG bytes) from the report's stage folder."""
    images: dict[str, bytes] = {}
    lines: list[str] = []
    pngs = sorted(stage.glob("*.png")) if stage is not None and stage.is_dir() else []
    if pngs:
        for png in pngs:
            name = f"{e.name}--{png.name}"
            images[name] = png.read_bytes()
            lines += [f"![{e.title}: {png.name}]({name})", ""]
        lines += [f"*As `countlens reproduce --preset test` made it{f' on {model}' if model else ''} "
                  f"(the test preset's tiny sizes: a picture of what the figure shows, not a result). "
                  f"`make demo` draws it at the quick sizes.*", ""]
    elif e.figure is None:
        lines += ["*A table: its numbers are in the files below and on the report page.*", ""]
    else:
        lines += ["*No picture in this build: the docs' report folder holds none for this stage "
                  "(`make docs` draws it with `countlens reproduce --preset test`).*", ""]
    return lines, images


def _notes(e) -> list[str]:
    """The reading notes of ``docs/gallery/notes/<stage>.md``, or the declaration's own words until written."""
    notes = NOTES / f"{e.name}.md"
    if notes.is_file():
        return [notes.read_text(encoding="utf-8").strip(), ""]
    lines = ["*No reading notes yet (`docs/gallery/notes/" + e.name + ".md`); what its code says:*", ""]
    return lines + [f"> {line}" if line.strip() else ">" for obj in (e.run, e.result)
                    for line in (inspect.getdoc(obj) or "").split("\n\n")[0].splitlines()] + [""]


def _run_it(e, by_name: dict, record: dict) -> list[str]:
    """The "Run it" section: the report command with its upstream stages, the Python call, what it reads."""
    lines = ["## Run it", "", "As a stage of the report (with the stages it reads):", "", "```bash",
             f"countlens reproduce --preset test --stages {','.join(_upstream(e, by_name))} --out report", "```", ""]
    call = {"capture": 'cl.capture("default", preset="quick")'}.get(e.name)
    if call is None:
        reads = "".join(f", {field}=..." for field in e.reads)
        call = f'cl.run("{e.name}", "quick"{reads})'
    lines += ["From Python (`import countlens as cl`; the result's `.plot()` draws the figure, `.save(folder)` "
              "writes its files):", "", "```python", call, "```", ""]
    if record.get("commands"):
        lines += ["The call the report made for this page's picture (`stage.json`):", "", "```python",
                  *record["commands"], "```", ""]
    if e.reads:
        lines += ["Reads: " + ", ".join(f"`{field}` from [{by_name[s].title}]({s}.md)" for field, s in e.reads.items()),
                  ""]
    return lines


def _files(e, record: dict) -> list[str]:
    """The "Files" section: the result file and its type, its tables, what the stage wrote, the code."""
    files = [e.result.FILE, *getattr(e.result, "RECORDS", {})]
    lines = ["## Files", "",
             f"- result: `{e.name}/{e.result.FILE}` — a `{e.result.__module__}.{e.result.__name__}` "
             f"(`{e.result.__name__}.read(path)` reads it back typed);"]
    if len(files) > 1:
        lines.append("- tables: " + ", ".join(f"`{f}`" for f in files[1:]) + ";")
    if record.get("files"):
        lines.append("- written by the report's stage: " + ", ".join(f"`{f}`" for f in record["files"]) + ";")
    if e.output:
        lines.append(f"- read by later stages: `{e.name}/{e.output}`;")
    mods = [m for m in (e.run.__module__, (e.figure or "").partition(":")[0]) if m]
    lines.append("- code: " + ", ".join(f"`{m}`" for m in dict.fromkeys(mods)) + ".")
    return [*lines, ""]


def _report_model(report: Path | None) -> str | None:
    if report is None or not (report / "reproduce.json").is_file():
        return None
    data = json.loads((report / "reproduce.json").read_text(encoding="utf-8"))
    model = data.get("model") or (data.get("capture") or {}).get("model")
    return str(model) if model else None


def index(declared: list, report: Path | None) -> str:
    """The gallery's index page: every experiment, in report order."""
    lines = ["# Figure gallery", "",
             "One page per table and figure, generated from the experiment registry "
             "(`countlens/core/registry.py`: every `declare(Experiment(...))`), so every experiment the code "
             "declares has its page. Each shows the picture the report draws, how to read it, the command and "
             "the Python call, its sizes at each preset and the files behind it.", "",
             "| stage | title | figure |", "|---|---|---|"]
    for e in declared:
        has = report is not None and any((report / e.name).glob("*.png"))
        lines.append(f"| [`{e.name}`]({e.name}.md) | {e.title} | {'yes' if has else ('table' if e.figure is None else '—')} |")
    return "\n".join(lines) + "\n"


def pages(report: Path | None) -> dict[str, str | bytes]:
    """Every gallery file: ``{"gallery/index.md": ..., "gallery/<stage>.md": ..., pictures}``."""
    declared = experiments()
    by_name = {e.name: e for e in declared}
    out: dict[str, str | bytes] = {"gallery/index.md": index(declared, report)}
    for e in declared:
        text, images = page(e, by_name, report)
        out[f"gallery/{e.name}.md"] = text
        out.update({f"gallery/{k}": v for k, v in images.items()})
    return out
