"""Ray's own account of a failed test: the warning and error lines its processes logged in this test process's
cluster, so that a failure that depends on Ray's timing keeps its cause in the test report (a Ray test that
failed once on loaded cores left only its assertion, issue 42)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

# glog's severity letter after the date: "[2026-12-05 01:22:06,702 E 19262 19262] ..."
SEVERE = re.compile(r"^\[[0-9-]+ [0-9:,.]+ [WEF] ")
FILES = ("raylet.out", "gcs_server.out", "worker-*.err", "python-core-worker-*.log", "python-core-driver-*.log")


def session_logs() -> Path | None:
    """The log folder of the Ray cluster this process holds, or ``None`` (Ray not imported or not started)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    node = getattr(ray._private.worker, "_global_node", None)
    return Path(node.get_logs_dir_path()) if node is not None else None


def severe_lines(folder: Path, last: int = 60) -> list[str]:
    """The last ``last`` warning, error and traceback lines of the cluster's logs in ``folder``, each with its
    file's name."""
    lines = []
    for pattern in FILES:
        for path in sorted(folder.glob(pattern)):
            text = path.read_text(encoding="utf-8", errors="replace").splitlines()
            lines += [f"{path.name}: {ln}" for ln in text
                      if SEVERE.match(ln) or (path.suffix == ".err" and ln.strip())]
    return lines[-last:]


def report_section() -> str | None:
    """The text of the report section, or ``None`` when there is no cluster or it logged nothing severe."""
    folder = session_logs()
    if folder is None or not folder.is_dir():
        return None
    lines = severe_lines(folder)
    return "\n".join([f"Ray's logs ({folder}):", *lines]) if lines else None
