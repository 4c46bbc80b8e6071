"""What scales how: fpemu's threads, a Dask LocalCluster, and the batched public matmul.

Four tables, every ratio measured in this run:

0. The machine itself: two processes (no GIL) running in-cache NumPy loops at once against
   one. On a VM whose two vCPUs share one physical core's load/store ports (SMT siblings),
   streaming loops such as ``np.multiply`` do not scale while ``np.sin`` does: fpemu's kernels
   are streaming loops, so that row bounds what threads can give there.
1. Thread scaling (``fpemu.threads``: 1, 2, all cores): a 512^3 h100 matmul (fp16 inputs;
   its tiles go to worker processes, :mod:`fpemu.procpool`), the same matmul with workers off
   (``FPEMU_PROCESSES=0``: tiles on threads), ``fpemu.round`` of 10^7 float64 values to fp16,
   and a training step (forward, backward and SGD update of an MLP whose matmuls accumulate
   with the h100 model). Medians and bests of interleaved runs; each result is compared bit
   for bit with the one-thread result. The workers' one-time start is timed first.
2. Dask: the same matmul and round on a ``distributed.LocalCluster`` (2 worker processes, one
   thread each) against the in-process call on all cores, bits compared (medians).
3. A batch of 10^5 K=16 fp16 dot products through the public ``fpemu.matmul(a[:, None, :],
   b[:, :, None], c=..., model="h100")`` against ``fpemu.tensorcore.mma.dpa`` on the same
   rows, ns per product, at one thread and at all cores (medians of interleaved runs); the last
   column times the route these batches took before (one tiny matrix per dot product).

The machine's load (``os.getloadavg``) is printed before and after: on a shared machine a
load above the core count means the threads compete with other work and the speedups are low
(running the script with a higher priority, ``nice -n -15`` in a session whose autogroup is
raised too, makes it take the cores first).

Run: OMP_NUM_THREADS=1 python benchmarks/bench_scale.py [--repeats 7] [--no-dask] [--only 1,3]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from timing import best_time, median_time

import fpemu
from fpemu import procpool
from fpemu.nn import functional
from fpemu.nn.optim import SGD
from fpemu.tensorcore.mma import dpa


def bits(x: Any) -> np.ndarray:
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def same(x: Any, y: Any) -> bool:
    if isinstance(x, list):
        return all(same(a, b) for a, b in zip(x, y, strict=True))
    return np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(bits(x), bits(y))


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def workloads() -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512)).astype(np.float16)
    b = rng.standard_normal((512, 512)).astype(np.float16)
    x = rng.standard_normal(10**7) * np.exp2(rng.integers(-20, 20, 10**7))
    pol = dataclasses.replace(fpemu.get_policy("torch_cuda_bf16"), acc_model="h100")
    xb = rng.standard_normal((256, 256)).astype(np.float32)
    yb = np.arange(256) % 10

    def step() -> list[np.ndarray]:
        m = fpemu.MLP([256, 512, 10], policy=pol, seed=0)
        opt = SGD(m.parameters(), lr=0.05)
        loss = functional.cross_entropy(m(xb), yb)
        loss.backward()
        opt.step()
        return [np.asarray(p.data) for p in m.parameters()]

    def on_threads() -> Any:
        """The matmul with worker processes off: its tiles on threads."""
        os.environ[procpool.ENV] = "0"
        try:
            return fpemu.matmul(a, b, fmt="fp16", model="h100")
        finally:
            del os.environ[procpool.ENV]

    return {
        "matmul 512^3 h100": lambda: fpemu.matmul(a, b, fmt="fp16", model="h100"),
        "  same, threads only": on_threads,
        "round 1e7 -> fp16": lambda: fpemu.round(x, "fp16"),
        "train step (h100 acc)": step,
    }


def _hardware_work(op: str) -> float:
    x = np.random.default_rng(0).standard_normal(262144).astype(np.float32)
    y = np.empty_like(x)
    f = np.sin if op == "sin" else np.multiply
    args = (x,) if op == "sin" else (x, x)
    t = time.perf_counter()
    for _ in range(400 if op == "sin" else 2000):
        f(*args, out=y)
    return time.perf_counter() - t


def hardware_scaling() -> None:
    """What the cores themselves give: two processes (no GIL) on in-cache NumPy loops."""
    import multiprocessing  # noqa: PLC0415

    print("\n0. The machine: 2 processes at once vs 1 (no GIL; in-L2 float32 loops, 1 MiB)")
    print(f"{'loop':24} {'1 process':>10} {'2 at once':>10} {'scaling':>8}")
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        for op in ("multiply", "sin"):
            one = min(pool.map(_hardware_work, [op]))
            two = max(pool.map(_hardware_work, [op, op]))
            print(f"np.{op:21} {one:>10.3f} {two:>10.3f} {2 * one / two:>7.2f}x")


def thread_scaling(repeats: int) -> None:
    cores = len(os.sched_getaffinity(0))
    counts = sorted({1, 2, cores})
    t0 = time.perf_counter()
    ready = procpool.start(timeout=120)
    print(f"\n1. Threads: {ready} worker process(es) started and ready in "
          f"{time.perf_counter() - t0:.2f} s (once per process). Median (and best) of {repeats} "
          "runs, the thread counts interleaved run by run (so that they meet the same machine "
          "load); speedup = time at 1 thread / time at n")  # fmt: skip
    print(f"{'workload':24} {'threads':>7} {'median s':>9} {'speedup':>8} {'best s':>7} "
          f"{'speedup':>8} {'bits = 1 thread':>16}")  # fmt: skip
    for name, fn in workloads().items():
        results: dict[int, Any] = {}
        times: dict[int, list[float]] = {n: [] for n in counts}
        for n in counts:  # warm-up, and the results to compare
            with fpemu.threads(n):
                results[n] = fn()
        for _ in range(repeats):
            for n in counts:
                with fpemu.threads(n):
                    times[n].append(best_time(fn, 1))
        med = {n: statistics.median(t) for n, t in times.items()}
        best = {n: min(t) for n, t in times.items()}
        for n in counts:
            eq = same(results[n], results[1])
            print(f"{name:24} {n:>7} {med[n]:>9.3f} {med[1] / med[n]:>7.2f}x {best[n]:>7.3f} "
                  f"{best[1] / best[n]:>7.2f}x {eq!s:>16}")  # fmt: skip


def dask_vs_in_process(repeats: int) -> None:
    import dask.array as da  # noqa: PLC0415 - optional
    from distributed import Client, LocalCluster, wait  # noqa: PLC0415

    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 512)).astype(np.float16).astype(np.float64)
    b = rng.standard_normal((512, 512)).astype(np.float16).astype(np.float64)
    x = rng.standard_normal(10**7)
    print(f"\n2. Dask LocalCluster (2 worker processes x 1 thread; inputs already on the workers, "
          f"results left there) vs in process (all cores), medians of {repeats}")  # fmt: skip
    print(f"{'workload':24} {'in process':>10} {'dask':>9} {'dask/in':>8} {'bits equal':>10}")
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
    ):
        A = client.persist(da.from_array(a, chunks=(256, 512)))
        B = client.persist(da.from_array(b, chunks=(512, 512)))
        X = client.persist(da.from_array(x, chunks=10**7 // 4))
        wait([A, B, X])
        runs = iter(range(10**9))

        def fresh(arr: Any) -> Any:
            """``arr`` under new keys (an identity layer where its chunks live): every run is
            computed, none found in the cluster's memory from the run before."""
            return arr.map_blocks(lambda blk, salt: blk, salt=next(runs), dtype=arr.dtype)

        cases = {
            "matmul 512^3 h100": (
                lambda: fpemu.matmul(a, b, fmt="fp16", model="h100"),
                lambda: fpemu.matmul(fresh(A), fresh(B), fmt="fp16", model="h100"),
            ),
            "round 1e7 -> fp16": (
                lambda: fpemu.round(x, "fp16"),
                lambda: fpemu.round(fresh(X), "fp16"),
            ),
        }

        def on_cluster(lazy: Callable[[], Any]) -> None:
            wait(client.persist(lazy()))

        for name, (mem, lazy) in cases.items():
            tm = median_time(mem, repeats)
            td = median_time(lambda lazy=lazy: on_cluster(lazy), repeats)
            eq = same(client.compute(lazy()).result(), mem())
            print(f"{name:24} {tm:>10.3f} {td:>9.3f} {td / tm:>7.2f}x {eq!s:>10}")


def batched_dots(repeats: int) -> None:
    rng = np.random.default_rng(2)
    B, K = 10**5, 16
    a = rng.standard_normal((B, K)).astype(np.float16).astype(np.float64)
    b = rng.standard_normal((B, K)).astype(np.float16).astype(np.float64)
    c = rng.standard_normal(B).astype(np.float32).astype(np.float64)

    def pub() -> Any:
        return fpemu.matmul(a[:, None, :], b[:, :, None], c=c[:, None, None], fmt="fp16",
                            model="h100")  # fmt: skip

    def direct() -> Any:
        return dpa(a, b, c, instruction="sm90.wgmma.f16.f32")

    print(f"\n3. 10^5 K=16 fp16 dot products (float64 arrays of fp16 values), ns per product, "
          f"medians of {repeats} interleaved runs (ratio of bests in brackets)")  # fmt: skip
    print(f"{'threads':>7} {'fpemu.matmul':>12} {'dpa':>7} {'matmul/dpa':>10} {'(best)':>7} "
          f"{'bits equal':>10} {'tiny-matrix route/dpa':>21}")  # fmt: skip
    # tensor_core_matmul calls the dot_batch its module imported: that name is replaced
    arch = importlib.import_module("fpemu.tensorcore.arch")
    real = arch.dot_batch
    for n in sorted({1, len(os.sched_getaffinity(0))}):
        with fpemu.threads(n):
            eq = same(np.asarray(pub(), dtype=np.float64)[:, 0, 0], direct())
            tp: list[float] = []
            td: list[float] = []
            told: list[float] = []
            for _ in range(repeats):
                tp.append(best_time(pub, 1))
                td.append(best_time(direct, 1))
                arch.dot_batch = lambda *args, **kw: None  # the route before: tiny matrices
                try:
                    told.append(best_time(pub, 1))
                finally:
                    arch.dot_batch = real
        mp, md, mo = (statistics.median(t) / (B * K) * 1e9 for t in (tp, td, told))
        print(f"{n:>7} {mp:>12.1f} {md:>7.1f} {mp / md:>9.2f}x {min(tp) / min(td):>6.2f}x "
              f"{eq!s:>10} {mo / md:>20.2f}x")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-dask", action="store_true", help="skip the LocalCluster table")
    ap.add_argument("--only", default="0,1,2,3", help="tables to run, e.g. 1,3")
    args = ap.parse_args()
    only = {int(x) for x in args.only.split(",")}
    print(f"before: {load()}")
    if 0 in only:
        hardware_scaling()
    if 1 in only:
        thread_scaling(args.repeats)
    if 2 in only and not args.no_dask:
        dask_vs_in_process(args.repeats)
    if 3 in only:
        batched_dots(args.repeats)
    print(f"\nafter: {load()}")


if __name__ == "__main__":
    main()
