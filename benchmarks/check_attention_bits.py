"""Check: the flash-attention emulations give the same bits as at git ``--base``: values,
float64 centers and error bounds of every output (NaN equal to NaN), on random calls and on
the bench GPT's.

For speed work that must not change a bit (``bench_attention_ops.py`` times the bench calls
and compares them too; this adds shapes and paths those calls do not reach). Random calls:
torch's own forward on q, k, v of (2, 3, L, D) in float32, bfloat16 and float16, two seeds,
contiguous and as the transposed views a GPT passes (``(B, T, H, D).transpose(1, 2)``), for
the cases below: causal and not, one and two 512-key blocks, 64-row q blocks, explicit and
negative scales, float masks with a fully masked row, logits large enough to underflow exp,
lq != lk both ways; each backward also with a logsumexp holding -inf, inf and NaN. Then the
bench GPT step's calls (bf16, fp32, fp16). Prints the calls that differ and a count; exits 1
if any does. ``python benchmarks/check_attention_bits.py [--base 971b57b]``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

import numpy as np
import torch
from bench_attention_ops import OPS, old_module  # this folder
from op_calls import TABLE, capture

from fpemu.validate.ops import Call
from fpemu.validate.ops._num import fmt
from fpemu.validate.watch.convert import to_numpy

# (lq, lk, d, causal, mask, logit magnitude, scale)
CASES = [(8, 8, 16, True, False, 1.0, None), (37, 37, 8, True, False, 3.0, None),
         (20, 600, 16, False, False, 1.0, None), (16, 16, 64, False, True, 1.0, None),
         (40, 40, 32, True, False, 8.0, None), (200, 200, 8, True, False, 1.0, None),
         (64, 64, 32, True, False, 1.0, None), (64, 64, 32, True, False, 30.0, -0.2),
         (33, 70, 16, True, False, 1.0, 0.3), (70, 33, 16, True, False, 1.0, None),
         (64, 64, 128, True, False, 1.0, None), (16, 16, 8, True, True, 1.0, None),
         (1, 1, 4, True, False, 1.0, None), (600, 600, 4, True, False, 1.0, None)]  # fmt: skip


def _same(x: Any, y: Any) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    u = np.dtype(f"u{x.dtype.itemsize}")
    eq = x.view(u) == y.view(u)
    if x.dtype.kind == "f":
        eq |= np.isnan(x) & np.isnan(y)
    return bool(eq.all())


def _agree(old: Any, new: Any, call: Call) -> bool:
    with np.errstate(all="ignore"):
        a_outs, b_outs = old(call), new(call)
    for a, b in zip(a_outs, b_outs, strict=True):
        idx = np.arange(a.value.size)
        (ca, ea), (cb, eb) = a.bounds_at(idx), b.bounds_at(idx)
        if not (_same(a.value, b.value) and _same(ca, cb) and _same(ea, eb)):
            return False
    return True


def _random_calls() -> list[tuple[str, Call]]:
    fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    calls = []
    dts = (torch.float32, torch.bfloat16, torch.float16)
    for case, dt, seed, view in itertools.product(CASES, dts, (0, 1), (False, True)):
        lq, lk, d, causal, mask, mag, scale = case
        g = torch.Generator().manual_seed(seed)

        def make(n: int, mag: float = mag, d: int = d, dt: Any = dt, g: Any = g,
                 view: bool = view) -> Any:  # fmt: skip
            if view:
                return (torch.randn(2, n, 3, d, generator=g) * mag).to(dt).transpose(1, 2)
            return (torch.randn(2, 3, n, d, generator=g) * mag).to(dt)

        q, k, v = make(lq), make(lk), make(lk) / mag
        kw: dict[str, Any] = {} if scale is None else {"scale": scale}
        if mask:
            m = torch.randn(lq, lk, generator=g).to(dt)
            m[min(2, lq - 1)] = -float("inf")
            kw["attn_mask"] = m
        try:
            out, lse = fwd(q, k, v, 0.0, causal, **kw)
        except RuntimeError as exc:  # torch's bf16 path needs AVX512 on some capabilities
            print(f"skipped {case} {dt}: {exc}")
            continue
        go = torch.randn(out.shape, generator=g).to(dt)
        npkw = {n: to_numpy(t) if isinstance(t, torch.Tensor) else t for n, t in kw.items()}

        def arr(*ts: Any) -> tuple[Any, ...]:
            return tuple(to_numpy(t) if isinstance(t, torch.Tensor) else t for t in ts)

        name = f"{case} {dt} seed {seed} {'view' if view else 'contiguous'}"
        outs = (fmt(to_numpy(out)), fmt(to_numpy(lse)))
        calls.append((name, Call(str(fwd), arr(q, k, v, 0.0, causal), npkw, outs)))
        lses = [("", lse)]
        if lq > 3:
            bad = lse.clone()
            bad[0, 0, 1], bad[0, 1, 3], bad[1, 0, 0] = -float("inf"), float("inf"), float("nan")
            lses.append((" non-finite lse", bad))
        for tag, ls in lses:
            args = arr(go, q, k, v, out, ls, 0.0, causal)
            calls.append((name + tag, Call(str(bwd), args, npkw, (fmt(to_numpy(q)),) * 3)))
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD")
    args = ap.parse_args()
    base = old_module(args.base)
    old = {OPS["forward"]: base.flash_attention, OPS["backward"]: base.flash_attention_backward}
    calls = _random_calls()
    for config in ("bf16", "fp32", "fp16"):
        for cs in capture(OPS.values(), config).values():
            calls += [(f"bench {config} #{i}", c) for i, c in enumerate(cs)]
    differ = [(name, c.op) for name, c in calls if not _agree(old[c.op], TABLE[c.op], c)]
    for name, op in differ:
        print(f"differs: {op.split('.')[1]} {name}")
    print(f"{len(calls)} calls against {args.base}: {len(differ)} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
