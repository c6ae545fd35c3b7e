"""Execute a tutorial written as a percent-format script (the jupytext "percent" format: ``# %%`` starts a
code cell, ``# %% [markdown]`` a Markdown cell whose lines are ``# ``-commented) and write it as a Markdown
page with every cell's output: what it printed, the value of its last expression as a notebook would show it
(``_repr_markdown_``, ``_repr_html_``, else ``repr``), and every matplotlib figure it left open, as a PNG.

The script stays a plain Python file (``python docs/tutorials/NAME.py`` runs it; ``jupytext --to notebook``
opens it as a notebook); the docs build runs it once per build, in one namespace, from the repository root.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

CELL = re.compile(r"^# %%(.*)$", re.M)


@dataclass
class Cell:
    kind: str  # "code" or "markdown"
    source: str


@dataclass
class Executed:
    """A tutorial run: its page (Markdown), its figures (file name -> PNG bytes), seconds, and the error of the
    first failing cell (``None`` when every cell ran)."""

    markdown: str
    images: dict[str, bytes] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None


def cells(text: str) -> list[Cell]:
    """The cells of a percent-format script (text before the first marker is dropped: the module docstring)."""
    parts = CELL.split(text)
    out = []
    for header, body in zip(parts[1::2], parts[2::2], strict=True):
        body = body.strip("\n")
        if "[markdown]" in header:
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in body.splitlines()]
            out.append(Cell("markdown", "\n".join(lines).strip()))
        elif body.strip():
            out.append(Cell("code", body))
    return out


def _display(value) -> str | None:
    if value is None:
        return None
    for method in ("_repr_markdown_", "_repr_html_"):
        shown = getattr(value, method, None)
        if callable(shown) and not isinstance(value, type):
            text = shown()
            if text:
                return text if method == "_repr_markdown_" else f'<div class="cl-output">{text}</div>'
    if type(value).__module__.startswith("matplotlib"):
        return None  # a figure shows as its picture
    return "```text\n" + repr(value) + "\n```"


@contextlib.contextmanager
def scratch_tempdir(prefix: str):
    """Inside the block, :mod:`tempfile` makes its folders in a fresh scratch folder, removed at the end: a
    tutorial's ``tempfile.mkdtemp()`` work folder (kept when a reader runs the script) leaves nothing behind
    in the system's temporary folder when the docs build runs it."""
    before = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as scratch:
        tempfile.tempdir = scratch
        try:
            yield Path(scratch)
        finally:
            tempfile.tempdir = before


def execute(path: str | os.PathLike, stem: str | None = None) -> Executed:
    """Run the tutorial at ``path`` cell by cell and return its page; figures are named ``STEM-N.png``.
    What the tutorial writes under :mod:`tempfile` folders is removed afterwards (:func:`scratch_tempdir`)."""
    path = Path(path)
    with scratch_tempdir(f"countlens-docs-{path.stem}-"):
        return _execute(path, stem or path.stem)


def _execute(path: Path, stem: str) -> Executed:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace: dict = {"__name__": "__main__", "__file__": str(path)}
    page, images = [], {}
    start = time.perf_counter()
    error = None
    plt.close("all")
    for number, cell in enumerate(cells(path.read_text(encoding="utf-8")), 1):
        if cell.kind == "markdown":
            page += [cell.source, ""]
            continue
        page += ["```python", cell.source, "```", ""]
        tree = ast.parse(cell.source, filename=f"{path}:cell{number}")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        out = io.StringIO()
        value = None
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                exec(compile(tree, f"{path} (cell {number})", "exec"), namespace)  # noqa: S102 - our tutorial
                if last is not None:
                    value = eval(compile(ast.Expression(last.value), f"{path} (cell {number})", "eval"),  # noqa: S307
                                 namespace)
        except Exception:  # noqa: BLE001 - shown on the page and returned as the run's error
            error = f"cell {number} of {path.name}:\n{traceback.format_exc(limit=-3)}"
        printed = out.getvalue().rstrip()
        if printed:
            page += ["```text", printed, "```", ""]
        shown = _display(value)
        if shown:
            page += [shown, ""]
        for num in plt.get_fignums():
            name = f"{stem}-{len(images) + 1}.png"
            buffer = io.BytesIO()
            plt.figure(num).savefig(buffer, format="png", dpi=80, bbox_inches="tight")
            images[name] = buffer.getvalue()
            page += [f"![Output of cell {number}]({name})", ""]
        plt.close("all")
        if error:
            page += ["```text", error, "```", ""]
            break
    seconds = time.perf_counter() - start
    page += [f"*Executed by the docs build in {seconds:.1f} s; the script: [`{path.name}`]({path.name}) "
             f"(`python docs/tutorials/{path.name}` runs it).*", ""]
    return Executed("\n".join(page), images, seconds, error)
