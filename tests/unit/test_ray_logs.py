"""The Ray section of a failed test's report keeps Ray's warnings, errors and workers' stderr, nothing else."""

from tests.helpers.ray_logs import report_section, severe_lines


def test_severe_lines_keep_warnings_errors_and_worker_stderr_only(tmp_path):
    (tmp_path / "raylet.out").write_text(
        "[2026-12-05 01:22:00,001 I 1 1] (raylet) main.cc:1: starting\n"
        "[2026-12-05 01:22:06,702 E 1 1] (raylet) worker_pool.cc:660: Some workers have not registered\n"
        "[2026-12-05 01:22:07,000 W 1 1] (raylet) node_manager.cc:2: slow\n", encoding="utf-8")
    (tmp_path / "worker-abc-1.err").write_text(":actor_name:CaptureActor\n\nTraceback (most recent call last)\n",
                                               encoding="utf-8")
    (tmp_path / "worker-abc-1.out").write_text("printed, not kept\n", encoding="utf-8")
    lines = severe_lines(tmp_path)
    assert lines == ["raylet.out: [2026-12-05 01:22:06,702 E 1 1] (raylet) worker_pool.cc:660: Some workers have "
                     "not registered",
                     "raylet.out: [2026-12-05 01:22:07,000 W 1 1] (raylet) node_manager.cc:2: slow",
                     "worker-abc-1.err: :actor_name:CaptureActor",
                     "worker-abc-1.err: Traceback (most recent call last)"]
    assert severe_lines(tmp_path, last=1) == lines[-1:]


def test_no_section_without_a_ray_cluster_in_this_process(monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not imported
    assert report_section() is None
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False))  # not started
    assert report_section() is None
