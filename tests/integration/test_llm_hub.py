"""Hub ids offline: a genuine Hugging Face cache layout (``models--org--name/{blobs,refs,snapshots}``) built
from tiny saved models, ``HF_HUB_CACHE`` pointed at it and ``HF_HUB_OFFLINE=1``: ``--model org/name`` loads
the ``main`` snapshot, ``--revision`` picks another, and an uncached id or revision is one line naming the
cache and the offline setting, exit 2, nothing written.

The hub library reads ``HF_HUB_CACHE`` when it is imported, so the commands run in a fresh Python process.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from countlens.core.store import read_meta
from countlens.llm import acts_array, load_capture
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer  # noqa: F401
from tests.helpers.model_families import BY_NAME, build_family_model

REPO = "tiny-org/tiny-qwen2"
COMMITS = ("a" * 40, "b" * 40)
SMALL = ["--L", "8", "--counts", "0,3,8", "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--quiet"]
RUNNER = """
import json, sys
from countlens.pipeline.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    results.append(code)
    print("@@", code, file=sys.stderr, flush=True)
"""


def add_snapshot(cache: Path, repo: str, commit: str, folder: Path) -> None:
    """Put ``folder``'s files in the cache as the snapshot ``commit`` of ``repo`` (blobs + symlinks)."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in folder.iterdir():
        data = path.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / path.name).symlink_to(os.path.relpath(blob, snapshot))


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory, family_model, smollm2_tokenizer):  # noqa: F811
    cache = tmp_path_factory.mktemp("hub")
    add_snapshot(cache, REPO, COMMITS[0], family_model("qwen2"))
    other = build_family_model(tmp_path_factory.mktemp("seed1") / "m", BY_NAME["qwen2"], seed=1)
    add_snapshot(cache, REPO, COMMITS[1], other)
    refs = cache / f"models--{REPO.replace('/', '--')}" / "refs"
    refs.mkdir()
    (refs / "main").write_text(COMMITS[0])
    return cache


def run_commands(cache: Path, *argvs) -> list[tuple[int, list[str]]]:
    """Run each ``countlens`` argv in one fresh process offline on ``cache``: (exit code, stderr lines)."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps([list(a) for a in argvs])], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results, lines = [], []
    for line in done.stderr.splitlines():
        if line.startswith("@@ "):
            results.append((int(line.split()[1]), lines))
            lines = []
        elif line.strip():
            lines.append(line)
    return results


def test_hub_id_offline_loads_the_cached_snapshot_and_revision_picks_another(hub_cache, tmp_path):
    main_out, other_out, bad_rev, absent = (tmp_path / n for n in ("main", "other", "bad-rev", "absent"))
    results = run_commands(
        hub_cache,
        ["llm", "capture", "--model", REPO, *SMALL, "--out", str(main_out)],
        ["llm", "capture", "--model", REPO, "--revision", COMMITS[1], *SMALL, "--out", str(other_out)],
        ["llm", "capture", "--model", REPO, "--revision", "v9.9", *SMALL, "--out", str(bad_rev)],
        ["llm", "capture", "--model", "tiny-org/not-cached", *SMALL, "--out", str(absent)],
    )
    assert [code for code, _ in results] == [0, 0, 2, 2], results
    first = read_meta(main_out)
    second = read_meta(other_out)
    assert first["model"] == REPO and first["model_source"]["hub_id"] == REPO
    assert first["model_source"]["revision"] == COMMITS[0] and first["model_source"]["requested_revision"] is None
    assert second["model_source"]["revision"] == COMMITS[1] and second["settings"]["revision"] == COMMITS[1]
    assert first["model_source"]["trust_remote_code"] is False  # off by default, and recorded
    assert np.abs(acts_array(load_capture(main_out)) - acts_array(load_capture(other_out))).max() > 1e-3
    for (_, lines), out, words in ((results[2], bad_rev, ["--revision v9.9", "cached: "]),
                                   (results[3], absent, ["tiny-org/not-cached"])):
        assert len(lines) == 1 and lines[0].startswith("countlens: error:"), lines
        for word in [*words, str(hub_cache), "HF_HUB_OFFLINE"]:
            assert word in lines[0], lines[0]
        assert not out.exists()


ONCE_RUNNER = """
import json, sys
import transformers
from countlens.llm import models
from countlens.pipeline.reproduce import reproduce

calls = {"snapshot": 0, "tokenizer": 0, "model": 0}
def counting(name, real):
    def call(*args, **kwargs):
        calls[name] += 1
        return real(*args, **kwargs)
    return call
models.resolve.cached_snapshot = counting("snapshot", models.resolve.cached_snapshot)
for name, cls in (("tokenizer", transformers.AutoTokenizer), ("model", transformers.AutoModelForCausalLM)):
    setattr(cls, "from_pretrained", counting(name, cls.from_pretrained))
out, model, revision = sys.argv[1:]
summary = reproduce(out, "test", {"model": model, "revision": revision}, only=["capture", "patching"])
print("@@" + json.dumps({"calls": calls, "status": {s["stage"]: s["status"] for s in summary["stages"]}}))
"""


def test_a_run_resolves_a_hub_revision_and_reads_it_once(hub_cache, tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-c", ONCE_RUNNER, str(out), REPO, COMMITS[1]], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("@@"))[2:])
    assert report["status"]["capture"] == report["status"]["patching"] == "done", report
    # capture and patching: one resolution of the revision, one tokenizer read, one model load
    assert report["calls"] == {"snapshot": 1, "tokenizer": 1, "model": 1}, report
    meta = read_meta(out / "capture" / "acts")
    assert meta["model_source"]["revision"] == COMMITS[1] and meta["model_source"]["requested_revision"] == COMMITS[1]
