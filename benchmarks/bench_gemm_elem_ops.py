"""Benchmark and bit check: the GEMM, cast and AdamW elementwise emulations, old (git) against
new, on the real calls of the bench GPT's watched step.

Calls: the step of ``bench_watch.py`` (2 layers, d=128, T=64, batch 8, AdamW's single-tensor
path) runs under ``fpemu.watch`` with ``FPEMU_PROCESSES=0`` after ``--warm`` unwatched steps,
and the emulations of :data:`OPS` record their :class:`~fpemu.validate.ops.Call`\\ s (deep
copies: the in-place ops overwrite torch's storage later). Each call then runs through the
emulation as of ``--base`` (the modules of :data:`MODULES` executed from ``git show`` into
throwaway modules that import one another's old versions) and through this tree's, old and
new alternating (:func:`timing.interleaved`, best of ``--repeats``); the times are summed over
an op's calls: ms per step.

The check (exit status 1 on any difference): every :class:`~fpemu.validate.ops.Out` of every
call, old against new, field by field: the value's bits, dtype and shape, ``exact``,
``reason``, ``center``/``err`` bits where given, and a lazy bound's (and its quick
estimate's) ``(center, err)`` bits at every output index and at three single indices (a GEMM's
bound gathers rows there), then the judged row (``judge_call``) as ``repr``. NaN equals NaN
only with the same bits.

``OMP_NUM_THREADS=1 python benchmarks/bench_gemm_elem_ops.py [--configs bf16 fp16 fp32]
[--base 03081cc] [--ops aten.mm.default ...]``
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import op_calls
from op_calls import TABLE, capture, judged  # this folder
from timing import interleaved  # this folder

from fpemu.validate.ops import Call, Out

OPS = (
    "aten.mm.default",
    "aten.addmm.default",
    "aten.bmm.default",
    "aten._to_copy.default",
    "aten.copy_.default",
    "aten.lerp_.Scalar",
    "aten.addcmul_.default",
    "aten.addcdiv_.default",
    "aten.sqrt.default",
    "aten.add.Tensor",
    "aten.add_.Tensor",
    "aten.mul.Tensor",
    "aten.mul_.Tensor",
    "aten.div.Tensor",
)
#: the modules compared, in import order (each imports only earlier ones of this list); one the
#: base does not have is skipped (the new modules import this tree's)
MODULES = ("_num", "_fma", "_fp", "elementwise", "libm", "optim", "casts", "matmul")


def old_table(base: str) -> dict[str, Any]:
    """The emulations of :data:`MODULES` as of git ``base`` (:func:`op_calls.old_table`)."""
    return op_calls.old_table(base, MODULES)


def _bits(a: Any) -> tuple[Any, ...]:
    """An array's (dtype, shape, bytes): equal exactly when the bits are."""
    arr = np.ascontiguousarray(np.asarray(a))
    return arr.dtype.str, arr.shape, arr.tobytes()


def _fields(o: Out | None, probes: list[np.ndarray]) -> Any:
    """Everything an Out says, as comparable bits."""
    if o is None:
        return None
    out: list[Any] = [_bits(o.value), o.exact, o.reason, o.bound is None, o.quick is None]
    out += [None if o.center is None else _bits(o.center),
            None if o.err is None else _bits(o.err)]  # fmt: skip
    for idx in probes:
        if o.bound is not None:
            out.append([_bits(v) for v in o.bound(idx)])
        if o.quick is not None:
            out.append([_bits(v) for v in o.quick(idx)])
    return out


def differences(old: Any, new: Any, call: Call) -> list[str]:
    """The fields in which the old and new emulation's Outs (and judged rows) differ."""
    os_, ns = list(old(call)), list(new(call))
    if len(os_) != len(ns):
        return [f"{len(os_)} outputs against {len(ns)}"]
    bad = []
    for k, (o, n) in enumerate(zip(os_, ns, strict=True)):
        size = int(np.size(o.value)) if o is not None else 0
        probes = [np.arange(size)] + [np.array([i]) for i in sorted({0, size // 2, size - 1})
                                      if size]  # fmt: skip
        fo, fn = _fields(o, probes), _fields(n, probes)
        if fo != fn:
            names = ["value", "exact", "reason", "lazy", "quick", "center", "err", "bounds"]
            which = [
                names[min(i, 7)]
                for i, (x, y) in enumerate(zip(fo or [], fn or [], strict=False))
                if x != y
            ]
            bad.append(f"output {k}: {which or 'kind'}")  # fmt: skip
    if repr(judged(old, call)) != repr(judged(new, call)):
        bad.append("judged row")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp16", "fp32"])
    ap.add_argument("--base", default="03081cc")
    ap.add_argument("--ops", nargs="+", default=list(OPS), help="a subset of the ops")
    ap.add_argument("--warm", type=int, default=2, help="unwatched steps before the recorded one")
    ap.add_argument("--no-time", action="store_true", help="the bit check only")
    args = ap.parse_args()
    old_fns = old_table(args.base)
    print(f"baseline: {', '.join(MODULES)} at {args.base}; times: the emulation per step (sum "
          f"over the op's calls), best of {args.repeats}, old and new alternating; recorded "
          f"step: {args.warm + 1}")  # fmt: skip
    print(f"{'config':6} {'op':24} {'calls':>5} {'old':>9} {'new':>9} {'old/new':>7}  bits")
    failed = 0
    for config in args.configs:
        calls = capture(args.ops, config, warm=args.warm)
        tot_o = tot_n = 0.0
        for op in args.ops:
            if not calls[op]:
                continue
            new_fn, old_fn = TABLE[op], old_fns[op]
            old_t = new_t = 0.0
            bad: list[str] = []
            for call in calls[op]:
                bad += differences(old_fn, new_fn, call)
                if not args.no_time:
                    o, n = interleaved(
                        lambda call=call, fn=old_fn: fn(call),
                        lambda call=call, fn=new_fn: fn(call),
                        args.repeats,
                    )
                    old_t, new_t = old_t + o, new_t + n
            failed += len(bad)
            tot_o, tot_n = tot_o + old_t, tot_n + new_t
            verdict = "same" if not bad else f"DIFFER in {len(bad)}: {sorted(set(bad))[:4]}"
            print(f"{config:6} {op:24} {len(calls[op]):5} {old_t * 1e3:7.2f}ms "
                  f"{new_t * 1e3:7.2f}ms {old_t / max(new_t, 1e-12):6.2f}x  {verdict}")  # fmt: skip
        print(f"{config:6} {'total':24} {'':5} {tot_o * 1e3:7.2f}ms {tot_n * 1e3:7.2f}ms "
              f"{tot_o / max(tot_n, 1e-12):6.2f}x")  # fmt: skip
    print(f"bit check: {'0 differences' if not failed else f'{failed} DIFFERENCES'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
