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
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from timing import best_time  # benchmarks/timing.py (this folder is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import bench_watch  # noqa: E402

import fpemu  # noqa: E402
from fpemu.validate.ops import TABLE, lookup  # noqa: E402
from fpemu.validate.watch.verdict import judge_call  # noqa: E402

OPS = {
    "forward": "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "backward": "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
}
MODULE = "fpemu/validate/ops/attention.py"
BOUND = "fpemu/validate/ops/_attention_bound.py"  # its helpers, also taken at ``base``


def _load(name: str, src: str) -> Any:
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def old_module(base: str) -> Any:
    """The attention module as of git ``base``, imported under another name (its emulations
    are taken out of the registry while it registers, then the current ones are put back),
    with its bound helpers (``_attention_bound``) as of ``base`` too where it had them."""

    def show(path: str) -> str | None:
        r = subprocess.run(["git", "-C", str(ROOT), "show", f"{base}:{path}"],
                           capture_output=True, text=True)  # fmt: skip
        return r.stdout if r.returncode == 0 else None

    src = show(MODULE)
    if src is None:
        raise SystemExit(f"{MODULE} does not exist at {base}")
    bound = show(BOUND)
    if bound is not None:
        _load("fpemu_attention_bound_base", bound)
        src = src.replace("fpemu.validate.ops._attention_bound", "fpemu_attention_bound_base")
    lookup(OPS["forward"])  # load the registry first
    saved = {op: TABLE.pop(op) for op in OPS.values()}
    try:
        return _load("fpemu_attention_base", src)
    finally:
        TABLE.update(saved)


def capture(config: str) -> dict[str, list[Any]]:
    """The Calls of the two emulations during one watched bench GPT step."""
    lookup(OPS["forward"])
    calls: dict[str, list[Any]] = {k: [] for k in OPS}
    saved = {op: TABLE[op] for op in OPS.values()}

    def recorder(kind: str, fn: Any) -> Any:
        def rec(call: Any) -> Any:
            calls[kind].append(call)
            return fn(call)

        return rec

    for kind, op in OPS.items():
        TABLE[op] = recorder(kind, saved[op])
    try:
        model, opt, scaler, batch = bench_watch.make(config)
        with fpemu.watch():
            bench_watch.step(model, opt, scaler, batch, config)
    finally:
        TABLE.update(saved)
    return calls


def judged(fn: Any, call: Any) -> Any:
    """judge_call of ``call`` with ``fn`` as its op's emulation."""
    saved = TABLE[call.op]
    TABLE[call.op] = fn
    try:
        return judge_call(call)
    finally:
        TABLE[call.op] = saved


def interleaved(old: Any, new: Any, call: Any, repeats: int) -> tuple[float, float]:
    """Best seconds of ``repeats`` calls of each, alternating (a shared machine's load then
    weighs on both alike)."""
    best_o = best_n = float("inf")
    for _ in range(repeats):
        best_o = min(best_o, best_time(lambda: old(call), 1))
        best_n = min(best_n, best_time(lambda: new(call), 1))
    return best_o, best_n


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
        calls = capture(config)
        for kind, op in OPS.items():
            new_fn = TABLE[op]
            old_fn = old_fns[kind]
            old_t = new_t = old_j = new_j = 0.0
            looser = tighter = 0.0
            same = same_v = True
            for call in calls[kind]:
                o, n = interleaved(old_fn, new_fn, call, args.repeats)
                old_t, new_t = old_t + o, new_t + n
                o, n = interleaved(lambda c: judged(old_fn, c), lambda c: judged(new_fn, c),  # noqa: B023
                                   call, args.repeats)  # fmt: skip
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
