"""Benchmark: the LayerNorm emulations (``native_layer_norm`` forward and backward) on the real
calls of the bench GPT step (benchmarks/bench_watch.py: 512 rows x 128 columns), the current
code against the code at a baseline commit, measured in the same run.

The calls are recorded from one watched step per config (bf16, fp32, fp16 autocast; after two
unwatched steps); the baseline's ``norms.py``, ``_fma.py`` and ``_moments.py`` are loaded from
``git show BASE:path`` into throwaway modules. Rows: op and config; per-call time of the
recorded calls, the best of ``--repeats`` runs with old and new alternating (on a loaded
machine the best is the code's own cost), old / new and the ratio, and a row of both ops in the
step's order. Every new result is first compared with the old one field by field
(:func:`out_bits`: dtype, shape and bits of the value, exact flag, reason, center and error
bits at every element); any difference exits 1 (a speed row with different bits would be
meaningless). Pin threads on a shared machine:

    OMP_NUM_THREADS=1 python benchmarks/bench_norm_ops.py [--base COMMIT] [--repeats N]
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import torch
from op_calls import bench_args, capture, git_show  # this folder
from timing import interleaved  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.validate import ops

OPS = ("aten.native_layer_norm.default", "aten.native_layer_norm_backward.default")
#: the commit before the latest LayerNorm speed-ups (16b5738: before the first ones)
BASE = "6bcc0c1"


def _old_modules(base: str) -> types.ModuleType:
    """The baseline's norms module (with its own ``_fma`` and, where the base has it,
    ``_moments``), registering nothing."""

    def src(path: str) -> str:
        text = git_show(base, path)
        if text is None:
            raise SystemExit(f"{path} does not exist at {base}")
        return text

    def load(name: str, text: str) -> types.ModuleType:
        mod = types.ModuleType(name)
        exec(compile(text, name, "exec"), mod.__dict__)
        sys.modules[name] = mod
        return mod

    load("_old_fma", src("fpemu/validate/ops/_fma.py"))
    text = src("fpemu/validate/ops/norms.py").replace(
        "from fpemu.validate.ops._fma import", "from _old_fma import"
    )
    moments = git_show(base, "fpemu/validate/ops/_moments.py")
    if moments is not None:
        load("_old_moments", moments.replace("from fpemu.validate.ops._fma import",
                                             "from _old_fma import"))  # fmt: skip
        text = text.replace("from fpemu.validate.ops._moments import", "from _old_moments import")
    real = ops.register
    ops.register = lambda *names: lambda fn: fn  # type: ignore[assignment]
    try:
        return load("_old_norms", text)
    finally:
        ops.register = real


def out_bits(outs: Any) -> list[tuple[Any, ...]]:
    """Each output's dtype, shape and value bits, exact flag and reason, and where bounded its
    center and error bits at every element (``bounds_at`` of every index: a lazy bound is asked
    everywhere, an eager one gathered): two emulations agree on every field the judge reads
    iff these are equal (NaN payloads and the signs of zeros included)."""

    def raw(a: Any) -> bytes:
        return b"" if a is None else np.ascontiguousarray(a).tobytes()

    res: list[tuple[Any, ...]] = []
    for o in outs:
        if o is None:
            res.append(())
            continue
        v = np.asarray(o.value)
        ce = o.bounds_at(np.arange(v.size)) if not o.exact else None
        res.append((str(v.dtype), v.shape, raw(v), o.exact, o.reason)
                   + (() if ce is None else (raw(ce[0]), raw(ce[1]))))  # fmt: skip
    return res


def main() -> None:
    args = bench_args(__doc__, BASE)
    old = _old_modules(args.base)
    olds = {OPS[0]: old.layer_norm, OPS[1]: old.layer_norm_backward}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; old = {args.base}")
    print(f"{'op':28} {'config':6} {'calls':>5} {'old/call':>10} {'new/call':>10} {'speed-up':>8}")
    for config in args.configs:
        calls = capture(OPS, config, warm=2)
        for op in OPS:
            new_fn = ops.TABLE[op]
            for c in calls[op]:
                if out_bits(new_fn(c)) != out_bits(olds[op](c)):
                    sys.exit(f"{op} {config}: bits differ")
            n = len(calls[op])
            t_old, t_new = interleaved(
                lambda: [olds[op](c) for c in calls[op]],  # noqa: B023
                lambda: [new_fn(c) for c in calls[op]],  # noqa: B023
                args.repeats,
            )
            print(f"{op.split('.')[1]:28} {config:6} {n:5} {t_old / n * 1e3:8.2f}ms "
                  f"{t_new / n * 1e3:8.2f}ms {t_old / t_new:7.2f}x")  # fmt: skip

        # the step's order, forward calls then backward ones: what one op leaves allocated or
        # freed weighs on the other (the per-op rows above repeat one op)
        n = len(calls[OPS[0]]) + len(calls[OPS[1]])
        t_old, t_new = interleaved(
            lambda: [olds[op](c) for op in OPS for c in calls[op]],  # noqa: B023
            lambda: [ops.TABLE[op](c) for op in OPS for c in calls[op]],  # noqa: B023
            args.repeats,
        )
        print(f"{'forward then backward':28} {config:6} {n:5} {t_old / n * 1e3:8.2f}ms "
              f"{t_new / n * 1e3:8.2f}ms {t_old / t_new:7.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
