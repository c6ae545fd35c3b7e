"""Thread counts for small numerics: torch intra-op threads and BLAS threads, each as a context manager.

On small tensors and matrices extra threads mostly spin, and on a machine whose cores are busy they cost
far more than they gain (measured in BENCHMARKS.md: the toy's Table 2 quick rows take 22 s with one torch
thread and 31 s with two on an idle 2-core machine; many small ridge decompositions up to 15x slower with
two BLAS threads under load). Rooms choose their count by measurement and set it through these two.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# The toy's default torch threads (`countlens toy ... --threads`, the report's toy stages).
TOY_THREADS = 1


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """At most ``n`` torch intra-op threads inside the block — never more than the process already has (a
    test worker's one thread stays one) — the previous count restored after it (``None``: leave the
    process's count)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(min(int(n), before))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One torch thread and one BLAS thread inside the block: the setting under which a computation gives the
    same bits in this process and in a worker process started with :func:`set_one_thread`."""
    with torch_threads(1), blas_threads(1):
        yield


def set_one_thread() -> None:
    """One torch thread and one BLAS thread for the rest of this process (a worker's initialiser)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(limits=1)  # the BLAS libraries loaded by now (numpy's, torch's)


def blas_threads(limit: int | None):
    """A context manager allowing at most ``limit`` BLAS threads inside it (``None``: as the process has
    them). Decompositions are chosen per size: on small matrices, or on a machine whose cores are busy,
    extra BLAS threads spin and slow the work down (BENCHMARKS.md)."""
    if limit is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=int(limit), user_api="blas")
