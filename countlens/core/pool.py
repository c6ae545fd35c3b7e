"""The process pool for independent, seeded jobs, and the progress bar every long loop shows.

:func:`pool_map` runs ``[func(*job) for job in jobs]`` in this process or in fresh worker processes; either
way each job runs on one torch thread and one BLAS thread (:func:`countlens.core.threads.one_thread`), so a
seeded job gives the same bits with any number of workers (BENCHMARKS.md: two workers with two BLAS threads
each ran Table 2 twice as slowly as one process).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from countlens.core.errors import ConfigError
from countlens.core.threads import one_thread, set_one_thread


def progress_bar(total: int, desc: str, progress: bool, **kwargs: Any):
    """A tqdm bar on stderr that does not stay on screen, or a silent one when ``progress`` is false."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, disable=not progress, **kwargs)


def pool_map(func: Callable[..., Any], jobs: list[tuple[Any, ...]], workers: int = 1, desc: str = "",
             progress: bool = False) -> list[Any]:
    """``[func(*job) for job in jobs]``, in this process or, with ``workers > 1``, in that many fresh
    (spawned: no forked torch/OpenMP state) processes, results in the order of ``jobs``. The progress bar
    counts each result as it comes back, in whatever order the workers finish; the first job to fail (in
    that order) raises, and the jobs not yet started are cancelled.

    ``func`` must be a module-level function, and a script that calls this with ``workers > 1`` needs the
    usual ``if __name__ == "__main__":`` guard of spawned processes.
    """
    if int(workers) < 1:
        raise ConfigError("workers", f"{{workers}} must be >= 1, got {workers}")
    with progress_bar(len(jobs), desc, progress) as bar:
        if int(workers) == 1 or len(jobs) == 1:
            out = []
            with one_thread():
                for job in jobs:
                    out.append(func(*job))
                    bar.update(1)
            return out
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(int(workers), len(jobs)), mp_context=context, initializer=set_one_thread) as pool:
            futures = [pool.submit(func, *job) for job in jobs]
            try:
                for future in as_completed(futures):
                    future.result()  # raises the job's own error
                    bar.update(1)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
            return [future.result() for future in futures]


def workers_for(jobs: int) -> int:
    """Processes for ``jobs`` independent seeded jobs (Table 2's runs, Table 3's attained columns): one per
    core, at most one per job."""
    return max(1, min(int(jobs), os.cpu_count() or 1))


__all__ = ["workers_for", "progress_bar", "pool_map"]
