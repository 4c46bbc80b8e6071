"""Speed of fpemu's matrix-instruction models against MMA-Sim 2.1.1 (baseline), same run.

Three tables, best of ``--repeat`` interleaved rounds each:

1. batches of ``--batch`` single-instruction dot products (K = the instruction's k, 16 where
   the instruction has it): fpemu ``dpa`` vs mmasim ``dpa``, ns per product and the ratio;
2. ``--size``^3 matrix products: fpemu ``mma`` vs mmasim ``op(A, B, C)``;
3. the 512^3 h100 architecture model against ``sequential`` (``fpemu.linalg.matmul``).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mma.py [--batch 100000] [--size 256] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

import fpemu.tensorcore  # noqa: F401 - registers the models
from fpemu.linalg import matmul
from fpemu.tensorcore.mma import dpa, mma

try:
    import torch
    from mmasim.amd import MFMA
    from mmasim.nv_ptx import MMA, WGMMA, MMABlockScale, TCGen05MMA
except ImportError:  # mmasim is a test extra: without it only fpemu is timed
    torch = None

#: (fpemu model, k, A format, mmasim constructor and arguments, torch dtype of A/B, of C)
CASES: list[tuple[str, int, str, Any]] = [
    ("sm80.mma.f16.f32", 16, "float16", ("MMA", "Ampere", "m16n8k16.f32.f16.f16.f32")),
    ("sm90.mma.f16.f32", 16, "float16", ("MMA", "Hopper", "m16n8k16.f32.f16.f16.f32")),
    ("sm90.mma.bf16.f32", 16, "bfloat16",
     ("MMA", "Hopper", "m16n8k16.f32.bf16.bf16.f32")),
    ("sm90.mma.f16.f16", 16, "float16", ("MMA", "Hopper", "m16n8k16.f16.f16.f16.f16")),
    ("sm89.mma.fp8.f32", 16, "float8_e4m3fn",
     ("MMA", "Ada Lovelace", "m16n8k16.f32.e4m3.e4m3.f32")),
    ("sm90.wgmma.fp8.f16", 32, "float8_e4m3fn", ("WGMMA", "Hopper", "m64n8k32.f16.e4m3.e4m3")),
    ("sm100.tcgen05.f8f6f4.f32", 32, "float8_e4m3fn",
     ("TCGen05MMA", "Blackwell", "m128n8k32.kind::f8f6f4.f32.e4m3.e4m3")),
    ("cdna3.mfma.f16.f32", 16, "float16", ("MFMA", "CDNA3", "f32_16x16x16_f16")),
    ("cdna3.mfma.fp8.f32", 16, "float8_e4m3fnuz", ("MFMA", "CDNA3", "f32_32x32x16_fp8_fp8")),
    ("cdna2.mfma.f16.f32", 16, "float16", ("MFMA", "CDNA2", "f32_16x16x16f16")),
    ("cdna3.mfma.f32.f32", 4, "float32", ("MFMA", "CDNA3", "f32_16x16x4_f32")),
    ("cdna1.mfma.f16.f32", 16, "float16", ("MFMA", "CDNA1", "f32_16x16x16f16")),
    ("sm90.mma.f64.f64", 4, "float64", ("MMA", "Hopper", "m8n8k4.f64.f64.f64.f64")),
]  # fmt: skip
_TORCH = {f: f for f in ("float16", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float32",
                         "float64")}  # fmt: skip


def _op(spec: Any) -> Any:
    cls = {"MMA": MMA, "WGMMA": WGMMA, "TCGen05MMA": TCGen05MMA, "MFMA": MFMA,
           "MMABlockScale": MMABlockScale}[spec[0]]  # fmt: skip
    return cls(spec[1], spec[2])


def _values(rng: np.random.Generator, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    t = torch.from_numpy(rng.standard_normal(shape)).to(getattr(torch, _TORCH[fmt]))
    return t.to(torch.float64).numpy()


def _best(fns: Mapping[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the tables."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--batch", type=int, default=100_000)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    if torch is None:
        print("mmasim is not installed: no baseline (pip install mmasim==2.1.1)")
        return 1
    torch.set_num_threads(1)  # one thread each: fpemu's BLAS runs under OPENBLAS_NUM_THREADS=1
    print(f"1. {args.batch} single-instruction dot products (ns per product)")
    print(f"{'model':26s} {'K':>3s} {'fpemu':>8s} {'mmasim':>8s} {'speed-up':>9s}")
    for name, k, fmt, spec in CASES:
        d16 = name.endswith(".f16")
        a, b = _values(rng, fmt, (args.batch, k)), _values(rng, fmt, (args.batch, k))
        cfmt = "float16" if d16 else ("float64" if name.endswith(".f64") else "float32")
        c = _values(rng, cfmt, (args.batch,))
        op = _op(spec)
        dt = getattr(torch, _TORCH[fmt])
        at, bt = torch.from_numpy(a).to(dt), torch.from_numpy(b).to(dt)
        ct = torch.from_numpy(c).to(getattr(torch, _TORCH[cfmt]))
        fns = {"fpemu": partial(dpa, a, b, c, instruction=name, a_fmt=fmt, k=k),
               "mmasim": partial(op.dpa, at, bt, ct)}  # fmt: skip
        best = _best(fns, args.repeat)
        per = {m: t / (args.batch * k) * 1e9 for m, t in best.items()}
        print(f"{name:26s} {k:3d} {per['fpemu']:8.1f} {per['mmasim']:8.1f} "
              f"{per['mmasim'] / per['fpemu']:8.1f}x")  # fmt: skip
    n = args.size
    print(f"\n2. {n}^3 matrix products (seconds)")
    print(f"{'model':26s} {'fpemu':>8s} {'mmasim':>8s} {'speed-up':>9s}")
    for name, k, fmt, spec in CASES[:2] + CASES[7:8]:
        a, b = _values(rng, fmt, (n, n)), _values(rng, fmt, (n, n))
        c = _values(rng, "float32", (n, n))
        op = _op(spec)
        dt = getattr(torch, _TORCH[fmt])
        at, bt = torch.from_numpy(a).to(dt), torch.from_numpy(b).to(dt)
        ct = torch.from_numpy(c).to(torch.float32)
        fns = {"fpemu": partial(mma, a, b, c, instruction=name, k=k),
               "mmasim": partial(op, at, bt, ct)}  # fmt: skip
        best = _best(fns, 2)
        print(f"{name:26s} {best['fpemu']:8.3f} {best['mmasim']:8.3f} "
              f"{best['mmasim'] / best['fpemu']:8.1f}x")  # fmt: skip
    print("\n3. 512^3 fp16 matmul, fpemu.linalg.matmul (seconds)")
    a = _values(rng, "float16", (512, 512))
    fns = {
        m: partial(matmul, a, a, fmt="fp16", acc="fp32", model=m) for m in ("sequential", "h100")
    }
    best = _best(fns, args.repeat)
    print(
        f"sequential {best['sequential']:.3f}  h100 {best['h100']:.3f}  "
        f"ratio {best['h100'] / best['sequential']:.1f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
