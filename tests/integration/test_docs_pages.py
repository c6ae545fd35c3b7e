"""The generated pages, without building the site: the gallery has a page for every experiment the registry
declares (a new experiment cannot be missing from it), and the command-line reference lists every command
and every option of the CLI's own parser."""

from __future__ import annotations

import argparse
import re

from docsgen import cli_reference, gallery


def test_every_declared_experiment_has_a_gallery_page():
    from countlens.pipeline.experiments import experiments

    declared = experiments()
    pages = gallery.pages(None)
    assert len(declared) >= 27
    for e in declared:
        page = pages[f"gallery/{e.name}.md"]
        assert page.startswith(f"# {e.title}\n"), e.name
        assert f"--stages {e.name}" in page or f",{e.name} --out" in page, e.name  # its command, its reads first
        assert f"`{e.name}/{e.result.FILE}`" in page and e.run.__module__ in page, e.name
        assert f"]({e.name}.md)" in pages["gallery/index.md"], e.name
    assert set(pages) >= {"gallery/index.md", *(f"gallery/{e.name}.md" for e in declared)}


def test_every_gallery_page_has_its_reading_notes():
    """Every declared experiment has hand-written notes (what it shows, how to read it, what is predicted),
    not the fallback that quotes its docstrings; and no notes file is left without its experiment."""
    from countlens.pipeline.experiments import experiments

    names = {e.name for e in experiments()}
    pages = gallery.pages(None)
    missing = sorted(n for n in names if "No reading notes yet" in pages[f"gallery/{n}.md"])
    assert not missing, f"write docs/gallery/notes/<stage>.md for {missing}"
    assert {p.stem for p in gallery.NOTES.glob("*.md")} <= names
    for name in ("das", "manifold"):
        notes = (gallery.NOTES / f"{name}.md").read_text(encoding="utf-8")
        assert "How to read it" in notes and "predict" in notes and len(notes) > 1500, name


def test_a_gallery_page_shows_the_reports_pictures(tmp_path):
    from countlens.pipeline.experiments import by_name

    experiment = by_name()["toy-figure1"]
    stage = tmp_path / experiment.name
    stage.mkdir()
    (stage / "figure1.png").write_bytes(b"\x89PNG picture")
    text, images = gallery.page(experiment, by_name(), tmp_path)
    assert images == {"toy-figure1--figure1.png": b"\x89PNG picture"}
    assert "![Figure 1: figure1.png](toy-figure1--figure1.png)" in text


def test_the_sizes_table_shows_what_the_presets_change():
    from countlens.pipeline.experiments import by_name

    experiment = by_name()["toy-figure1"]
    sizes = "\n".join(gallery.sizes_table(experiment))
    test, quick, full = (experiment.preset(p).L for p in ("test", "quick", "full"))
    assert f"| `L` | `{test}` | `{quick}` | `{full}` |" in sizes


def test_the_cli_reference_lists_every_command_and_option():
    text = cli_reference.reference()
    commands = list(cli_reference.commands())
    assert len(commands) > 30
    options = 0
    for path, parser in commands:
        assert f"## `{' '.join(path)}` {{#{cli_reference.anchor(path)}}}" in text, path
        section = text.split(f"{{#{cli_reference.anchor(path)}}}", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction) or action.dest == "help":  # noqa: SLF001
                continue
            for flag in action.option_strings:
                assert re.search(rf"`{re.escape(flag)}`", section), (path, flag)
                options += 1
    assert options > 200


def test_an_executed_tutorial_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    """The docs build runs each tutorial; its ``tempfile.mkdtemp()`` work folder goes into a scratch folder that
    is removed afterwards, and ``tempfile`` is left as it was."""
    import tempfile

    from docsgen import notebook

    system = tmp_path / "system-tmp"
    system.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    script = tmp_path / "t.py"
    script.write_text("# %%\nimport tempfile\nfrom pathlib import Path\n\nwork = Path(tempfile.mkdtemp(prefix='w-'))\n"
                      "(work / 'x.txt').write_text('1')\nprint(work.parent.parent == Path(r'SYSTEM'), work.is_dir())\n"
                      .replace("SYSTEM", str(system)), encoding="utf-8")
    run = notebook.execute(script)
    assert run.error is None, run.error
    assert "True True" in run.markdown  # the work folder was made inside a scratch folder of the system's
    assert list(system.iterdir()) == []  # and nothing is left there
    assert tempfile.tempdir == str(system)
