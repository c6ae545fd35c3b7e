import os

# `make test` runs the suite on every core with pytest-xdist (`-n auto --dist loadgroup`): one worker per core,
# so each worker (and each CLI it starts) keeps to one thread — two threads per worker on busy cores cost far
# more than they gain (BENCHMARKS.md, "the test suite").
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import pytest  # noqa: E402

from tests.helpers.llm_fixtures import smollm2_tokenizer  # noqa: F401, E402 - session fixture

# Tests never reach the network: hub look-ups must fail fast, not hang.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TQDM_DISABLE", "1")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's ``--dist loadgroup``: a test file's tests stay on one worker, so its module fixtures
    (a trained organism, a capture) are built once, and every test that reads the session's
    ``test_preset_report`` shares that worker too, so the report is built once."""
    for item in items:
        group = "test_preset_report" if "test_preset_report" in item.fixturenames else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that ran on the module's local Ray cluster carries Ray's own warning and error lines
    (:mod:`tests.helpers.ray_logs`)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "local_cluster" in getattr(item, "fixturenames", ()):
        from tests.helpers.ray_logs import report_section

        text = report_section()
        if text:
            report.sections.append(("Ray's logs", text))


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from countlens.core.threads import set_one_thread

        set_one_thread()


@pytest.fixture
def one_torch_thread():
    """Run a test on one torch thread: the toy's tensors are small, and a second thread only adds
    contention on a shared machine."""
    from countlens.core.threads import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def tiny_chat_model(tmp_path_factory, smollm2_tokenizer):  # noqa: F811
    """A tiny random Llama chat model with SmolLM2's tokenizer (cheap to capture)."""
    from tests.helpers.tiny_models import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("model") / "llama", "llama", tokenizer_dir=smollm2_tokenizer)


@pytest.fixture(scope="session")
def test_preset_report(tmp_path_factory, tiny_chat_model):
    """``countlens reproduce --preset test`` on the tiny model, once per session, with two ``repeat`` tasks set
    beside its ``lists`` (``--tasks``): (OUT folder, exit code). Treat it as read-only."""
    from countlens.pipeline.cli import main

    out = tmp_path_factory.mktemp("report") / "r"
    code = main(["reproduce", "--preset", "test", "--model", str(tiny_chat_model), "--out", str(out),
                 "--tasks", "repeat:separator=comma,repeat:separator=space"])
    return out, code
