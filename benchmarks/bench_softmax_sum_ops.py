"""Benchmark: the emulations of the bench GPT's loss and reductions (``_log_softmax``, its
backward, ``sum.dim_IntList``, ``nll_loss`` forward/backward, ``embedding_dense_backward``) on
the real calls of the bench GPT step (benchmarks/bench_watch.py), the current code against the
code at a baseline commit, measured in the same run.

The calls are recorded from one watched step per config (after two unwatched ones); the
baseline's modules (``softmax.py``, ``reductions.py``, ``losses.py``, ``embedding.py``) are
loaded from ``git show BASE:path`` into throwaway modules (their registrations are undone). Every
new result is first compared with the old one field by field (:func:`bench_norm_ops.out_bits`:
value bits, exact flag, reason, center and error bits at every element); any difference
exits 1. Rows: op and config; per-call time (the best of ``--repeats`` rounds, old and new
alternating), old / new and the ratio; ``judged`` rows time ``judge_call`` (emulation and
verdict, lazy bounds included) the same way, and a last row per config all ops in the step's
order. Pin threads on a shared machine:

    OMP_NUM_THREADS=1 python benchmarks/bench_softmax_sum_ops.py [--base COMMIT] [--repeats N]
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
from bench_norm_ops import out_bits  # this folder
from op_calls import bench_args, capture, git_show, judged
from timing import interleaved

from fpemu.validate import ops

#: op -> the module that emulates it
OPS = {
    "aten._log_softmax.default": "softmax",
    "aten._log_softmax_backward_data.default": "softmax",
    "aten.sum.dim_IntList": "reductions",
    "aten.nll_loss_forward.default": "losses",
    "aten.nll_loss_backward.default": "losses",
    "aten.embedding_dense_backward.default": "embedding",
}
#: the commit before these speed-ups
BASE = "6bcc0c1"


def old_emulations(base: str, modules: set[str]) -> dict[str, Any]:
    """The baseline's emulations of every op the ``modules`` register (op -> function as
    registered, errstate wrapper included); the current table is left as it was."""
    ops.lookup(next(iter(OPS)))  # the registry loaded first
    saved = dict(ops.TABLE)
    found: dict[str, Any] = {}
    try:
        for name in sorted(modules):
            path = f"fpemu/validate/ops/{name}.py"
            text = git_show(base, path)
            if text is None:
                raise SystemExit(f"{path} does not exist at {base}")
            mod = types.ModuleType(f"_old_{name}")
            sys.modules[mod.__name__] = mod
            ops.TABLE.clear()  # (registering an op twice raises)
            exec(compile(text, mod.__name__, "exec"), mod.__dict__)
            found.update(ops.TABLE)
    finally:
        ops.TABLE.clear()
        ops.TABLE.update(saved)
    return found


def main() -> None:
    args = bench_args(__doc__, BASE)
    olds = old_emulations(args.base, set(OPS.values()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; old = {args.base}")
    print(f"{'op':34} {'config':6} {'calls':>5} {'old/call':>10} {'new/call':>10} {'speed-up':>8}")
    bad = 0
    for config in args.configs:
        calls = capture(OPS, config, warm=2)
        for op in OPS:
            for c in calls[op]:
                if out_bits(ops.TABLE[op](c)) != out_bits(olds[op](c)):
                    print(f"BITS DIFFER: {op} {config}")
                    bad += 1
        if bad:
            continue
        for op in OPS:
            new_fn, cs, n = ops.TABLE[op], calls[op], len(calls[op])
            for what, old_run, new_run in (
                ("", lambda: [olds[op](c) for c in cs], lambda: [new_fn(c) for c in cs]),  # noqa: B023
                (" judged", lambda: [judged(olds[op], c) for c in cs],  # noqa: B023
                 lambda: [judged(new_fn, c) for c in cs]),  # noqa: B023
            ):  # fmt: skip
                t_old, t_new = interleaved(old_run, new_run, args.repeats)
                print(f"{op.split('.')[1] + what:34} {config:6} {n:5} {t_old / n * 1e3:8.3f}ms "
                      f"{t_new / n * 1e3:8.3f}ms {t_old / t_new:7.2f}x")  # fmt: skip
        n = sum(len(v) for v in calls.values())
        t_old, t_new = interleaved(
            lambda: [judged(olds[op], c) for op in OPS for c in calls[op]],  # noqa: B023
            lambda: [judged(ops.TABLE[op], c) for op in OPS for c in calls[op]],  # noqa: B023
            args.repeats,
        )
        print(f"{'all judged, step order':34} {config:6} {n:5} {t_old * 1e3:8.3f}ms "
              f"{t_new * 1e3:8.3f}ms {t_old / t_new:7.2f}x  (per step)")  # fmt: skip
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
