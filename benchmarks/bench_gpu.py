"""fpemu on a GPU (CuPy arrays): rounding against the copy bandwidth, matmul against cuBLAS.

Two tables, each against a baseline measured in the same run on the same device:

1. ``fpemu.round`` throughput on CuPy arrays as a fraction of the device's copy bandwidth
   (``cupy.copyto`` of the same array: read + write, the floor any elementwise pass pays).
2. Emulated FP16 matmul (``fpemu.linalg.matmul`` sequential model and this GPU's
   tensor-core model) against the native FP16 matmul (``cupy.matmul`` on float16, cuBLAS).

Without CuPy or a usable GPU it prints why and exits with status 0 (nothing to measure).

    PYTHONPATH=. python benchmarks/bench_gpu.py [--elements 67108864] [--sizes 512 1024]

Not yet run on a GPU in this repository.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

import fpemu
import fpemu.tensorcore  # registers the tensor-core models
from fpemu.backend import cupy_or_none
from fpemu.linalg import matmul


def best_seconds(cupy: Any, fn: Callable[[], Any], repeat: int) -> float:
    """Best wall-clock time of ``fn`` over ``repeat`` runs, synchronising the device."""
    fn()  # warm up: kernel compilation and memory pool
    cupy.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def rounding_table(cupy: Any, n: int, repeat: int) -> None:
    """Rounding throughput as a fraction of the copy bandwidth, per input dtype and format."""
    print(f"{'input':>8} {'format':>14} {'mode':>6} {'GB/s':>8} {'copy GB/s':>10} {'fraction':>9}")
    for dtype in (np.float32, np.float64):
        m = n if dtype == np.float32 else n // 2
        x = cupy.random.standard_normal(m, dtype=np.float64).astype(dtype)
        y = cupy.empty_like(x)
        nbytes = 2 * x.nbytes  # one read and one write
        copy = nbytes / best_seconds(cupy, partial(cupy.copyto, y, x), repeat) / 1e9
        for fmt, mode in (("bfloat16", "rne"), ("float16", "rne"), ("float8_e4m3fn", "rne"),
                          ("bfloat16", "rtz")):  # fmt: skip
            t = best_seconds(cupy, partial(fpemu.round, x, fmt, mode=mode), repeat)
            gbs = nbytes / t / 1e9
            name = np.dtype(dtype).name
            print(f"{name:>8} {fmt:>14} {mode:>6} {gbs:>8.1f} {copy:>10.1f} {gbs / copy:>8.1%}")


def matmul_table(cupy: Any, sizes: Sequence[int], model: str, repeat: int) -> None:
    """Emulated FP16 matmul time relative to native cuBLAS FP16 matmul."""
    print(f"\n{'n^3':>6} {'method':>22} {'seconds':>9} {'vs native':>10}")
    rng = np.random.default_rng(0)
    for n in sizes:
        a = cupy.asarray(fpemu.round(rng.standard_normal((n, n)), "fp16"))
        b = cupy.asarray(fpemu.round(rng.standard_normal((n, n)), "fp16"))
        a16, b16 = a.astype(cupy.float16), b.astype(cupy.float16)
        native = best_seconds(cupy, partial(cupy.matmul, a16, b16), repeat)
        rows = {"native cupy fp16": native}
        for m in ("sequential", model):
            run = partial(matmul, a, b, fmt="fp16", acc="fp32", model=m)
            rows[f"fpemu {m}"] = best_seconds(cupy, run, max(1, repeat // 3))
        for label, t in rows.items():
            print(f"{n:>6} {label:>22} {t:>9.4f} {t / native:>9.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    """Run both tables, or explain why not."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--elements", type=int, default=2**26, help="float32 elements to round")
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args(argv)
    cupy = cupy_or_none()
    if cupy is None:
        print("bench_gpu: CuPy with a usable CUDA GPU is needed; none here, nothing measured.",
              file=sys.stderr)  # fmt: skip
        return 0
    from fpemu.tensorcore.hardware.mma import device_capability, device_name, model_for_capability  # noqa: PLC0415

    major, minor = device_capability(cupy)
    try:
        model = model_for_capability(major, minor)
    except ValueError:
        model = "h100"
    print(f"device: {device_name(cupy)} (compute capability {major}.{minor}); model {model}\n")
    rounding_table(cupy, args.elements, args.repeat)
    matmul_table(cupy, args.sizes, model, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
