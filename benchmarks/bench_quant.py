"""Speed of fpemu.quant against torchao's CPU path and mmaemu, measured in the same run.

- MXFP8 (E4M3, RCEIL and FLOOR) and NVFP4 quantization of ``--n`` (10**7) float32 values:
  ``fpemu.quant.quantize`` vs torchao 0.18 ``to_mx`` / ``nvfp4_quantize`` (eager, CPU).
- A ``--size``^3 (512) E4M3 scaled matmul with split accumulation (promotion every 128 K):
  ``fpemu.quant.scaled_matmul(model="h100")`` vs ``mmaemu.scaled_mm(profile="hopper",
  use_fast_accum=False, splitk=1)`` (the same model, bit for bit; checked here too).

Prints the best of ``--repeat`` runs and the ratio baseline/fpemu (> 1: fpemu is faster).

    python benchmarks/bench_quant.py [--n 10000000] [--size 512] [--repeat 3]
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence

import numpy as np
from timing import best_time  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.quant import quantize, scaled_matmul


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch  # noqa: PLC0415 - baselines: optional packages, imported when run
    from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: PLC0415
    from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: PLC0415
    from torchao.prototype.mx_formats.nvfp4_tensor import (  # noqa: PLC0415
        nvfp4_quantize,
        per_tensor_amax_to_scale,
    )

    torch.set_flush_denormal(False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n // 1024, 1024)).astype(np.float32)
    xt = torch.from_numpy(x)
    rows = []
    for rule in ("rceil", "floor"):
        mode = getattr(ScaleCalculationMode, rule.upper())
        f = best_time(lambda r=rule: quantize(x, "mxfp8_e4m3", scale_rule=r), args.repeat)
        b = best_time(lambda m=mode: to_mx(xt, torch.float8_e4m3fn, 32, m), args.repeat)
        rows.append((f"MXFP8 E4M3 {rule}, {x.size:.0e} values", "torchao to_mx", f, b))
    f = best_time(lambda: quantize(x, "nvfp4", scale_rule="torchao"), args.repeat)
    b = best_time(
        lambda: nvfp4_quantize(xt, 16, per_tensor_amax_to_scale(xt.abs().max())), args.repeat
    )
    rows.append((f"NVFP4, {x.size:.0e} values", "torchao nvfp4_quantize", f, b))

    import mmaemu  # noqa: PLC0415

    n = args.size
    a = (torch.randn(n, n) * 4).to(torch.float8_e4m3fn)
    bt = (torch.randn(n, n) * 4).to(torch.float8_e4m3fn)
    A, B = a.float().numpy().astype(np.float64), bt.float().numpy().astype(np.float64).T
    one = torch.tensor(1.0)
    ours = scaled_matmul(A, B, accumulation="split", model="h100")
    theirs = mmaemu.scaled_mm(a, bt.T, one, one, out_dtype=torch.float32, use_fast_accum=False,
                              profile="hopper", splitk=1).numpy()  # fmt: skip
    same = np.array_equal(ours.astype(np.float32).view(np.uint32), theirs.view(np.uint32))
    reps = max(1, args.repeat - 1)
    f = best_time(lambda: scaled_matmul(A, B, accumulation="split", model="h100"), reps)
    b = best_time(lambda: mmaemu.scaled_mm(a, bt.T, one, one, out_dtype=torch.float32,
                                           use_fast_accum=False, profile="hopper", splitk=1),
                  reps)  # fmt: skip
    rows.append((f"scaled matmul {n}^3 split (bit-equal: {same})", "mmaemu scaled_mm", f, b))
    print(f"{'case':<44} {'baseline':<24} {'fpemu s':>9} {'base s':>9} {'base/fpemu':>10}")
    for case, base, f, b in rows:
        print(f"{case:<44} {base:<24} {f:9.3f} {b:9.3f} {b / f:10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
