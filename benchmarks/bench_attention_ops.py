"""Benchmark: the watch path of the flash-attention emulations, old (git) against new.

Calls: the real ones of the bench GPT step (``bench_watch.py``): the step runs once under
``fpemu.watch`` with the two emulations wrapped to record their
:class:`~fpemu.validate.ops.Call`; each recorded call is then timed with the current module and
with the module as it was at ``--base`` (default ``HEAD``; loaded from ``git show`` into a
temporary module, with its ``_attention_bound`` helpers of the same commit), in the same run.
Columns: the emulation's time (best of ``--repeats``, old and new alternating) and the ratio
old/new; the same for the whole judgement of the call
(:func:`~fpemu.validate.watch.verdict.judge_call`: the emulation, then torch's outputs judged
against it, which reads the bounds only where the bits differ); how the bounds compare,
elementwise over every output: ``looser`` is max(new err / old err) - 1 and ``tighter`` is
max(old err / new err) - 1 (the new bound may be looser only by its documented float32
widening); whether the values and the centers agree bit for bit and judge_call's rows are
equal.
Pin the threads on a shared machine:
``OMP_NUM_THREADS=1 python benchmarks/bench_attention_ops.py [--configs bf16 fp32]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from op_calls import TABLE, capture, git_show, judged, load_source, lookup  # this folder
from timing import interleaved  # benchmarks/timing.py (this folder is on sys.path)

OPS = {
    "forward": "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "backward": "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
}
MODULE = "fpemu/validate/ops/attention.py"
BOUND = "fpemu/validate/ops/_attention_bound.py"  # its helpers, also taken at ``base``


def old_module(base: str) -> Any:
    """The attention module as of git ``base``, imported under another name (its emulations
    are taken out of the registry while it registers, then the current ones are put back),
    with its bound helpers (``_attention_bound``) as of ``base`` too where it had them."""
    src = git_show(base, MODULE)
    if src is None:
        raise SystemExit(f"{MODULE} does not exist at {base}")
    bound = git_show(base, BOUND)
    if bound is not None:
        load_source("fpemu_attention_bound_base", bound)
        src = src.replace("fpemu.validate.ops._attention_bound", "fpemu_attention_bound_base")
    lookup(OPS["forward"])  # load the registry first
    saved = {op: TABLE.pop(op) for op in OPS.values()}
    try:
        return load_source("fpemu_attention_base", src)
    finally:
        TABLE.update(saved)


def compare(old: list[Any], new: list[Any]) -> tuple[float, float, bool]:
    """(looser, tighter, same values and centers, bit for bit) over every output element."""
    looser = tighter = 0.0
    same = True
    for o, n in zip(old, new, strict=True):
        same &= bool((o.value.view(np.uint8) == n.value.view(np.uint8)).all())
        idx = np.arange(np.size(o.value))
        (co, eo), (cn, en) = o.bounds_at(idx), n.bounds_at(idx)
        same &= bool((co.view(np.uint64) == cn.view(np.uint64)).all())  # the centers too
        with np.errstate(divide="ignore", invalid="ignore"):
            r = en / eo
        r = r[np.isfinite(r) & (eo > 0)]
        if r.size:
            looser, tighter = max(looser, r.max() - 1), max(tighter, 1 / r.min() - 1)
    return looser, tighter, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--base", default="HEAD")
    args = ap.parse_args()
    base = old_module(args.base)
    old_fns = {"forward": base.flash_attention, "backward": base.flash_attention_backward}
    print(
        f"baseline: {MODULE} at {args.base}; times: best of {args.repeats}, old and new alternating"
    )
    print(f"{'config':7} {'op':9} {'calls':>5} {'old':>9} {'new':>9} {'old/new':>8} "
          f"{'judge old':>9} {'judge new':>9} {'old/new':>8} {'looser':>9} {'tighter':>9} "
          "same-values same-verdict")  # fmt: skip
    for config in args.configs:
        by_op = capture(OPS.values(), config)
        calls = {kind: by_op[op] for kind, op in OPS.items()}
        for kind, op in OPS.items():
            new_fn = TABLE[op]
            old_fn = old_fns[kind]
            old_t = new_t = old_j = new_j = 0.0
            looser = tighter = 0.0
            same = same_v = True
            for call in calls[kind]:
                o, n = interleaved(lambda: old_fn(call), lambda: new_fn(call), args.repeats)  # noqa: B023
                old_t, new_t = old_t + o, new_t + n
                o, n = interleaved(lambda: judged(old_fn, call), lambda: judged(new_fn, call),  # noqa: B023
                                   args.repeats)  # fmt: skip
                old_j, new_j = old_j + o, new_j + n
                lo, ti, sa = compare(old_fn(call), new_fn(call))
                looser, tighter, same = max(looser, lo), max(tighter, ti), same and sa
                same_v &= judged(old_fn, call) == judged(new_fn, call)
            n = max(len(calls[kind]), 1)
            print(f"{config:7} {kind:9} {len(calls[kind]):5} {old_t / n * 1e3:7.2f}ms "
                  f"{new_t / n * 1e3:7.2f}ms {old_t / max(new_t, 1e-12):7.2f}x "
                  f"{old_j / n * 1e3:7.2f}ms {new_j / n * 1e3:7.2f}ms "
                  f"{old_j / max(new_j, 1e-12):7.2f}x "
                  f"{looser:9.2e} {tighter:9.2e} {same!s:11} {same_v}")  # fmt: skip


if __name__ == "__main__":
    main()
