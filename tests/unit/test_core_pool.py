"""The process pool (:func:`countlens.core.pool.pool_map`): results in job order, the progress bar counting
each result as it comes back (a slow first job no longer holds the bar at 0 while later jobs are done)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from countlens.core import pool
from countlens.core.errors import ConfigError


def _square_after_the_bar_moved(k: int, marker: str, wait_s: float) -> tuple[int, bool]:
    """Job ``k``: ``(k * k, whether the parent's bar had counted a result when it returned)``. Job 0 waits
    (up to ``wait_s``) until the parent has counted another job's result, so it finishes last."""
    deadline = time.monotonic() + (wait_s if k == 0 else 0.0)
    while not Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return k * k, Path(marker).exists()


def _fails_on_two(k: int) -> int:
    if k == 2:
        raise ValueError("job 2 failed")
    return k


class _Bar:
    """A progress bar that records its count and leaves ``marker`` once it has counted a result."""

    def __init__(self, marker: Path):
        self.marker, self.n = marker, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        self.n += n
        self.marker.touch()


@pytest.fixture
def bar(tmp_path, monkeypatch):
    made = _Bar(tmp_path / "counted")
    monkeypatch.setattr(pool, "progress_bar", lambda total, desc, progress, **kw: made)
    return made


def test_the_bar_counts_results_as_they_complete_and_results_keep_job_order(bar):
    jobs = [(k, str(bar.marker), 120.0) for k in range(4)]
    out = pool.pool_map(_square_after_the_bar_moved, jobs, workers=2)
    # job 0 returned only after the parent had counted a later job's result (in job order it would have
    # waited for job 0 and counted nothing: job 0 then times out and says False)
    assert out[0] == (0, True)
    assert [r[0] for r in out] == [k * k for k in range(4)] and bar.n == 4


def test_one_worker_runs_in_this_process_in_job_order(bar):
    assert pool.pool_map(_fails_on_two, [(k,) for k in (0, 1, 3)], workers=1) == [0, 1, 3] and bar.n == 3


def test_a_failed_job_raises_its_own_error_from_the_workers(bar):
    with pytest.raises(ValueError, match="job 2 failed"):
        pool.pool_map(_fails_on_two, [(k,) for k in range(4)], workers=2)


def test_workers_below_one_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="workers"):
        pool.pool_map(_fails_on_two, [(1,)], workers=0)
