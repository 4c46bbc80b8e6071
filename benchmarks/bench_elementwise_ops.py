"""Benchmark: the watch path of the AdamW elementwise ops, bias-gradient sums and casts, old
(git) against new.

Calls: the real ones of the bench GPT step (``bench_watch.py``, 2 layers, d=128, AdamW's
single-tensor path): the step runs once under ``fpemu.watch`` with ``FPEMU_PROCESSES=0`` (every
judgement in this thread) and the emulations of :data:`OPS` wrapped to record their
:class:`~fpemu.validate.ops.Call` (its arrays copied when recorded: the in-place ops later
overwrite torch's storage). Each recorded call is then judged (``judge_call``: the emulation,
then the comparison with torch's output) with the current modules and with the modules as they
were at ``--base`` (default ``HEAD``; ``_fma``, ``_fp``, ``elementwise``, ``optim``,
``reductions`` and ``casts`` loaded from ``git show`` into throwaway modules that import one
another), in the same run, old and new alternating; times are the best of ``--repeats``
(:func:`timing.best_time`), summed over an op's calls, per step.

Besides the times each row says whether old and new agree: ``values`` bit for bit (and the same
exactness claim), ``verdicts`` (the whole judged row), ``bounds`` (center and err bit for bit at
every element) and ``fault``: the verdicts with a one-ulp fault planted in torch's output at
one element (the first, middle and last of each call in turn; the exact ops must say
``differs``, the bounded ones whatever their bound says, the same for old and new).
``--warm N`` records the step after N unwatched ones (the first step's Adam state is zeros: its
``addcmul`` sums are exact products, many on float32 midpoints). Pin the threads on a shared
machine: ``OMP_NUM_THREADS=1 python benchmarks/bench_elementwise_ops.py [--configs bf16 fp32]
[--base COMMIT] [--warm N]``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import numpy as np
import op_calls
from op_calls import TABLE, capture, judged  # this folder
from timing import interleaved  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.validate.ops import Call

OPS = (
    "aten.sqrt.default",
    "aten.lerp_.Scalar",
    "aten.addcmul_.default",
    "aten.addcdiv_.default",
    "aten.add_.Tensor",
    "aten.mul_.Tensor",
    "aten.div.Tensor",
    "aten.sum.dim_IntList",
    "aten._to_copy.default",
)
#: the modules compared, in import order (each imports only earlier ones of this list; one a
#: base does not have is skipped: ``libm`` came out of ``elementwise``)
MODULES = ("_fma", "_fp", "elementwise", "libm", "optim", "reductions", "casts")


def old_table(base: str) -> dict[str, Any]:
    """The emulations of :data:`MODULES` as of git ``base`` (:func:`op_calls.old_table`)."""
    return op_calls.old_table(base, MODULES)


def _same_bits(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ua, ub = (np.ascontiguousarray(x).view(np.uint8) for x in (a, b))
    return bool((ua == ub).all())


def agree(old: Any, new: Any, call: Call) -> tuple[bool, bool, bool, bool]:
    """(same values and claims, same verdict rows, same bounds, same verdicts with planted
    one-ulp faults)."""
    os_, ns = list(old(call)), list(new(call))
    values = bounds = True
    for o, n in zip(os_, ns, strict=True):
        if o is None or n is None:
            values &= o is n
            continue
        values &= _same_bits(o.value, n.value) and o.exact == n.exact
        idx = np.arange(np.size(o.value))
        bo, bn = o.bounds_at(idx), n.bounds_at(idx)
        if bo is None or bn is None:
            bounds &= bo is None and bn is None
        else:
            bounds &= all(_same_bits(x, y) for x, y in zip(bo, bn, strict=True))
    verdicts = repr(judged(old, call)) == repr(judged(new, call))
    fault = True
    outs = call.options["outputs"]
    for k, t in enumerate(outs):
        t = np.asarray(t)
        if (t.dtype.kind != "f" and t.dtype.name != "bfloat16") or t.size == 0:
            continue
        for pos in sorted({0, t.size // 2, t.size - 1}):
            bad = np.array(t, copy=True, order="C")
            bad.reshape(-1).view(f"u{t.dtype.itemsize}")[pos] += 1  # one ulp away from zero
            planted = Call(call.op, call.args, call.kwargs, call.out_dtypes, call.capability,
                           call.model, {**call.options,
                                        "outputs": [*outs[:k], bad, *outs[k + 1:]]})  # fmt: skip
            fault &= repr(judged(old, planted)) == repr(judged(new, planted))
    return values, verdicts, bounds, fault


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--base", default="HEAD")
    ap.add_argument("--ops", nargs="+", default=list(OPS), help="a subset of the ops")
    ap.add_argument("--warm", type=int, default=0, help="unwatched steps before the recorded one")
    args = ap.parse_args()
    old_fns = old_table(args.base)
    print(f"baseline: {', '.join(MODULES)} at {args.base}; times: judge_call per step (sum over "
          f"the op's calls), best of {args.repeats}, old and new alternating; recorded step: "
          f"{args.warm + 1}")  # fmt: skip
    print(f"{'config':6} {'op':24} {'calls':>5} {'old':>9} {'new':>9} {'old/new':>7}  "
          "values verdicts bounds fault  verdicts(new)")  # fmt: skip
    for config in args.configs:
        calls = capture(OPS, config, warm=args.warm)
        tot_o = tot_n = 0.0
        for op in args.ops:
            new_fn = TABLE[op]
            old_t = new_t = 0.0
            same = [True] * 4
            verdicts: Counter[str] = Counter()
            for call in calls[op]:
                o, n = interleaved(lambda: judged(old_fns[op], call),  # noqa: B023
                                   lambda: judged(new_fn, call), args.repeats)  # noqa: B023
                old_t, new_t = old_t + o, new_t + n
                same = [s and a for s, a in zip(same, agree(old_fns[op], new_fn, call),
                                                strict=True)]  # fmt: skip
                verdicts[judged(new_fn, call)["verdict"]] += 1
            TABLE[op] = new_fn
            tot_o, tot_n = tot_o + old_t, tot_n + new_t
            flags = "  ".join(f"{s!s:6}" for s in same)
            print(f"{config:6} {op:24} {len(calls[op]):5} {old_t * 1e3:7.2f}ms "
                  f"{new_t * 1e3:7.2f}ms {old_t / max(new_t, 1e-12):6.2f}x  {flags} "
                  f"{dict(verdicts)}")  # fmt: skip
        print(f"{config:6} {'total':24} {'':5} {tot_o * 1e3:7.2f}ms {tot_n * 1e3:7.2f}ms "
              f"{tot_o / max(tot_n, 1e-12):6.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
