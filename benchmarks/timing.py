"""Timing helpers shared by the benchmark scripts (imported as ``timing`` from this folder).

Machines are noisy: the best of several runs estimates the cost of the code itself, the median
the cost a user sees; each script says which it reports.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeat: int) -> float:
    """Best wall-clock seconds of ``repeat`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall-clock seconds of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(old: Callable[[], object], new: Callable[[], object], repeats: int) -> tuple[
    float, float
]:
    """Best wall-clock seconds of ``old()`` and of ``new()`` over ``repeats`` rounds that run
    one then the other (a shared machine's load then weighs on both alike), after one warm-up
    call of each."""
    old(), new()
    best_old = best_new = float("inf")
    for _ in range(repeats):
        best_old = min(best_old, best_time(old, 1))
        best_new = min(best_new, best_time(new, 1))
    return best_old, best_new
