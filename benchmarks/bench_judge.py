"""Benchmark: the judge alone (:func:`~fpemu.validate.watch.verdict.judge`: torch's output
against the emulation's ``Out``), old (git ``--base``) against new, on the bench GPT's step.

Calls: every ATen op of one watched bench step (``bench_watch.py``, after 2 unwatched steps),
recorded by ``op_calls.capture``. Each emulation runs once; then each (torch output, ``Out``)
pair is judged by the current ``verdict.judge`` and by the one at ``--base`` (default: the
commit before this round of judge changes), which runs with the helpers it had there: ``_num``
(``to``, ``max_ulps``), ``Out.bounds_at`` and the GEMM's judge-time ``bound``/``quick``
closures (the matmul module at ``--base`` computes its ``Out``; its values are checked equal
bit for bit to the current ones). Every pair's old and new ``Judged`` are asserted equal field
by field (floats by their bits) before anything is timed; the emulations are not timed.

Two timings per config, milliseconds of judging per step, old, new and old/new, in total and
split by kind of output (identical; bounded by ``center``/``err``; lazy: a bound at indices,
the GEMM's with ``quick``; other: differs without a bound):

* ``warm``: each output judged old, new, old, new, ... ``--repeats`` times, the best of each
  summed over the step's outputs (its arrays in cache: the code's own cost);
* ``step``: every output judged once in step order, an old round and a new round (which goes
  first alternates), ``3 x --repeats`` times; the best round of each (an output's arrays leave
  the cache before its next judgement, as in a watched step, where the judge meets them among
  every other op's arrays).

Pin the threads on a shared machine:
``OMP_NUM_THREADS=1 python benchmarks/bench_judge.py [--configs bf16 fp32] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import math
import os
import struct
import time
from typing import Any

import numpy as np
from op_calls import TABLE, capture, git_show, load_source, lookup  # this folder

from fpemu.validate.ops import names
from fpemu.validate.watch import verdict

BASE = "03081cc"
MATMUL_OPS = ("aten.mm.default", "aten.bmm.default", "aten.matmul.default",
              "aten.addmm.default", "aten.baddbmm.default", "aten.mv.default",
              "aten.dot.default")  # fmt: skip


def _source(base: str, path: str) -> str:
    src = git_show(base, path)
    if src is None:
        raise SystemExit(f"{path} does not exist at {base}")
    return src


def _replace(src: str, old: str, new: str) -> str:
    if old not in src:
        raise SystemExit(f"the source at --base has no {old!r}: update bench_judge.py")
    return src.replace(old, new)


def old_modules(base: str) -> tuple[Any, dict[str, Any]]:
    """The verdict module at ``base`` with ``base``'s ``_num`` and ``Out.bounds_at``, and the
    matmul emulations at ``base`` (op -> function)."""
    load_source("fpemu_num_base", _source(base, "fpemu/validate/ops/_num.py"))
    ops = load_source("fpemu_ops_base", _source(base, "fpemu/validate/ops/__init__.py"))
    src = _source(base, "fpemu/validate/watch/verdict.py")
    src = _replace(src, "from fpemu.validate.ops._num import", "from fpemu_num_base import")
    src = _replace(src, "out.bounds_at(", "_BOUNDS_AT(out, ")
    old_verdict = load_source("fpemu_verdict_base", src)
    old_verdict._BOUNDS_AT = ops.Out.bounds_at  # the base's method on the current Out
    msrc = _source(base, "fpemu/validate/ops/matmul.py")
    msrc = _replace(msrc, "from fpemu.validate.ops._num import", "from fpemu_num_base import")
    lookup(MATMUL_OPS[0])  # load the registry first
    saved = {op: TABLE.pop(op) for op in MATMUL_OPS if op in TABLE}
    try:
        load_source("fpemu_matmul_base", msrc)
        old_mm = {op: TABLE[op] for op in saved}
    finally:
        TABLE.update(saved)
    return old_verdict, old_mm


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return type(a) is type(b) and bool(a == b)


def same_judged(a: Any, b: Any) -> bool:
    """Equal field by field, floats by their bits."""
    return a._fields == b._fields and all(_same(x, y) for x, y in zip(a, b, strict=True))


def _same_bits(x: Any, y: Any) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def pairs(config: str, old_mm: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    """(torch's output, old Out, new Out) of every judged output of one bench step."""
    calls = capture(names(), config, warm=2)
    out = []
    for op, cs in calls.items():
        for call in cs:
            new = list(lookup(op)(call))  # type: ignore[misc]
            old = list(old_mm[op](call)) if op in old_mm else new
            for t, o, n in zip(call.options["outputs"], old, new, strict=True):
                if n is None:
                    continue
                assert _same_bits(o.value, n.value), op
                out.append((t, o, n))
    return out


def kind(out: Any, j: Any) -> str:
    if j.verdict == "identical":
        return "identical"
    if out.bound is not None:
        return "lazy"
    return "bounded" if out.err is not None and not out.exact else "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp16", "fp32"])
    ap.add_argument("--base", default=BASE)
    args = ap.parse_args()
    old_verdict, old_mm = old_modules(args.base)
    kinds = ("identical", "bounded", "lazy", "other")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")  # fmt: skip
    print(f"baseline: judge at {args.base}; ms of judging per step: warm = the sum of each "
          f"output's best of {args.repeats} (old and new alternating), step = the best of "
          f"{3 * args.repeats} step rounds, old and new alternating)")  # fmt: skip
    print(f"{'config':6} {'mode':5} {'outputs':>7} {'old':>8} {'new':>8} {'old/new':>7}  "
          + "  ".join(f"{k + ' old/new':>23}" for k in kinds))  # fmt: skip
    for config in args.configs:
        ps = pairs(config, old_mm)
        cats = []
        for t, o, n in ps:
            jo, jn = old_verdict.judge(t, o), verdict.judge(t, n)
            assert same_judged(jo, jn), (jo, jn)
            cats.append(kinds.index(kind(n, jn)))
        # warm: each output judged old, new, old, new, ... (best of each)
        warm = np.zeros((2, len(kinds)))
        for (t, o, n), k in zip(ps, cats, strict=True):
            best_o = best_n = math.inf
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                old_verdict.judge(t, o)
                t1 = time.perf_counter()
                verdict.judge(t, n)
                t2 = time.perf_counter()
                best_o, best_n = min(best_o, t1 - t0), min(best_n, t2 - t1)
            warm[:, k] += best_o, best_n
        # step: every output judged once in step order, an old round and a new round (which
        # goes first alternates), 3 x repeats times; the best round of each (load only adds)
        rounds = np.zeros((3 * args.repeats, 2, len(kinds)))
        for r in range(len(rounds)):
            for w in (0, 1) if r % 2 == 0 else (1, 0):
                fn = (old_verdict.judge, verdict.judge)[w]
                for (t, *outs), k in zip(ps, cats, strict=True):
                    t0 = time.perf_counter()
                    fn(t, outs[w])
                    rounds[r, w, k] += time.perf_counter() - t0
        best = rounds.sum(axis=2).argmin(axis=0)  # the best old round and the best new one
        step = np.stack([rounds[best[0], 0], rounds[best[1], 1]])
        for label, m in (("warm", warm), ("step", step)):
            cols = "  ".join(
                f"{m[0, k] * 1e3:6.2f} {m[1, k] * 1e3:6.2f} "
                f"{m[0, k] / max(m[1, k], 1e-12):5.2f}x ({cats.count(k):3})"
                for k in range(len(kinds))
            )
            o, n = m[0].sum(), m[1].sum()
            print(f"{config:6} {label:5} {len(ps):7} {o * 1e3:6.2f}ms {n * 1e3:6.2f}ms "
                  f"{o / n:6.2f}x  {cols}")  # fmt: skip


if __name__ == "__main__":
    main()
