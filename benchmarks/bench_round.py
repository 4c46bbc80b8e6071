"""Rounding throughput: float64 -> {fp16, bf16, e4m3fn, e5m2} -> float64, in ns per element.

Baselines measured in the same run: numpy's float64->float16 cast, ml_dtypes' astype (which
goes via float32, so it is not correctly rounded from float64) and gfloat's round_ndarray.
Each cell is the best of several repeats. Run: python benchmarks/bench_round.py [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gfloat
import gfloat.formats as gf
import ml_dtypes
import numpy as np

import fpemu

FORMATS = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}
GFLOAT = {
    "float16": gf.format_info_binary16,
    "bfloat16": gf.format_info_bfloat16,
    "float8_e4m3fn": gf.format_info_ocp_e4m3,
    "float8_e5m2": gf.format_info_ocp_e5m2,
}


def inputs(kind: str, n: int, fmt: str) -> np.ndarray:
    """wide: log-uniform 2**-30..2**20 (subnormals, overflow, some exact ties); in: in range."""
    rng = np.random.default_rng(0)
    sign = rng.choice([-1.0, 1.0], n)
    if kind == "wide":
        x = np.exp2(rng.uniform(-30, 20, n)) * sign
        x[::97] = fpemu.round(x[::97], fmt) + fpemu.ulp(x[::97], fmt) / 2  # exact ties
        return x
    f = fpemu.get_format(fmt)
    return np.exp2(rng.uniform(f.emin, f.emax, n)) * sign


def best(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-gfloat", action="store_true", help="skip gfloat (slow at 10**7)")
    args = ap.parse_args()
    print(f"fpemu.round uses {fpemu.num_threads()} thread(s); ns/element, best of {args.repeat}")
    print(f"{'n':>9} {'dist':5} {'format':14} {'fpemu':>7} {'numpy f16':>9} {'ml_dtypes':>9} "
          f"{'gfloat':>8} {'ml/fpemu':>8} {'gfloat/fpemu':>12}")  # fmt: skip
    with np.errstate(all="ignore"):
        for n in args.sizes:
            for kind in ("wide", "in"):
                for fmt in FORMATS:
                    row(n, kind, fmt, args.repeat, gfl=not args.no_gfloat and n <= 10**6)


def row(n: int, kind: str, fmt: str, repeat: int, *, gfl: bool) -> None:
    """Time one (size, distribution, format) cell and print it."""
    x, dt = inputs(kind, n, fmt), FORMATS[fmt]
    ours = best(lambda: fpemu.round(x, fmt), repeat) / n * 1e9
    ml = best(lambda: x.astype(dt).astype(np.float64), repeat) / n * 1e9
    npf = float("nan")
    if fmt == "float16":
        npf = best(lambda: x.astype(np.float16).astype(np.float64), repeat) / n * 1e9
    g = best(lambda: gfloat.round_ndarray(GFLOAT[fmt], x), 1) / n * 1e9 if gfl else float("nan")
    print(
        f"{n:>9} {kind:5} {fmt:14} {ours:7.2f} {npf:9.2f} {ml:9.2f} {g:8.1f} "
        f"{ml / ours:8.2f} {g / ours:12.1f}"
    )


if __name__ == "__main__":
    main()
