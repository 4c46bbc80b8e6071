"""Benchmark: the watch path of the GELU emulations (``gelu``, ``gelu_backward``), old (git)
against new, judged as the watcher judges them.

Calls: the real ones of the bench GPT step (``bench_watch.py``): the step runs once under
``fpemu.watch`` with ``FPEMU_PROCESSES=0`` and the two emulations wrapped to record their
:class:`~fpemu.validate.ops.Call` (torch's outputs included). Each recorded call is then judged
by :func:`fpemu.validate.watch.verdict.judge_call` with the current activations module and with
the module as it was at ``--base`` (default ``main``; loaded from ``git show`` into a temporary
module, with its helpers as of the base too: ``HELPERS``), in the same run, old and new
alternating; times are the best of ``--repeats``. Each row also gives both verdicts and how
many elements differ from the emulation's value (the elements whose bound had to be
computed): a new verdict must be ``identical`` or ``bounded``, never ``differs``; the last
column says whether the two emulations' values are the same bit for bit. A last row
per config judges each ``gelu_backward`` call again with ``x`` made strided (the same values;
torch then runs ATen's kernel, not oneDNN's: the bounded path).
Pin the threads on a shared machine:
``OMP_NUM_THREADS=1 python benchmarks/bench_gelu_ops.py [--configs fp32 bf16 fp16]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch
from op_calls import TABLE, capture, git_show, judged, load_source, lookup  # this folder
from timing import interleaved  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.validate.ops import Call
from fpemu.validate.watch.convert import to_numpy

OPS = {"forward": "aten.gelu.default", "backward": "aten.gelu_backward.default"}
#: where GELU's emulations live (``activations.py`` before ``gelu.py`` was split out of it)
MODULES = ("fpemu/validate/ops/gelu.py", "fpemu/validate/ops/activations.py")
#: helpers of the module that changed with it, loaded as of the base too (in import order;
#: the ones a base does not have are skipped): oneDNN's kernels (and their FMA) included, so
#: the base's float32 rows run the base's emulations of them
HELPERS = ("fpemu/validate/ops/_fma.py", "fpemu/validate/ops/_onednn.py",
           "fpemu/validate/ops/_onednn_bwd.py", "fpemu/validate/ops/_iv.py",
           "fpemu/validate/ops/_erf.py", "fpemu/validate/ops/_fp.py",
           "fpemu/validate/ops/_act.py")  # fmt: skip


def _base_module(base: str, path: str, name: str, renames: dict[str, str]) -> Any:
    """The module ``path`` as of git ``base``, imported as ``name`` (``sys.modules``), with the
    imports of ``renames``' keys pointed at their base copies."""
    src = git_show(base, path)
    if src is None:
        raise SystemExit(f"{path} does not exist at {base}")
    for new, old in renames.items():
        src = src.replace(f"from {new} import", f"from {old} import")
        package, module = new.rsplit(".", 1)  # ``from package import module as alias`` too
        src = src.replace(f"from {package} import {module} as", f"import {old} as")
    return load_source(name, src)


def old_emulations(base: str) -> dict[str, Any]:
    """The two emulations of the activations module as of git ``base``, with its erf and
    interval helpers as of ``base`` too (registered into an emptied table, taken out, and the
    current table put back)."""
    lookup(OPS["forward"])  # load the registry first
    saved = dict(TABLE)
    TABLE.clear()
    renames: dict[str, str] = {}
    try:
        for helper in HELPERS:
            if git_show(base, helper) is None:
                continue
            name = f"fpemu_base_{helper.rsplit('/', 1)[1][:-3]}"
            _base_module(base, helper, name, renames)
            renames[helper[:-3].replace("/", ".")] = name
        module = next(m for m in MODULES if git_show(base, m) is not None)
        _base_module(base, module, "fpemu_base_gelu", renames)
        return {kind: TABLE[op] for kind, op in OPS.items()}
    finally:
        TABLE.clear()
        TABLE.update(saved)


def strided(call: Any) -> Any:
    """``call`` with ``x`` strided (the same values) and torch's output for it."""
    dy, x = call.args[0], call.args[1]
    xs = np.stack([x, x], -1)[..., 0]
    out = torch.ops.aten.gelu_backward.default(_torch(dy), _torch(xs), **call.kwargs)
    return Call(call.op, (dy, xs), call.kwargs, call.out_dtypes, capability=call.capability,
                options={**call.options, "outputs": [to_numpy(out)]})  # fmt: skip


def _torch(a: np.ndarray) -> Any:
    """A torch view of a NumPy array (bfloat16 through its bits)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--configs", nargs="+", default=["fp32", "bf16", "fp16"])
    ap.add_argument("--base", default="main")
    args = ap.parse_args()
    old = old_emulations(args.base)
    print(f"baseline: GELU's module at {args.base}; times: judge_call, best of {args.repeats}, "
          "old and new alternating; verdict (elements differing from the value)")  # fmt: skip
    print(f"{'config':7} {'op':10} {'calls':>5} {'old':>9} {'new':>9} {'old/new':>8}  "
          f"{'old verdicts':24} {'new verdicts':24} values")  # fmt: skip
    for config in args.configs:
        by_op = capture(OPS.values(), config)
        calls = {kind: by_op[op] for kind, op in OPS.items()}
        calls["bw-strided"] = [strided(c) for c in calls["backward"]]
        for kind in (*OPS, "bw-strided"):
            op = OPS.get(kind, OPS["backward"])
            new_fn = TABLE[op]
            old_t = new_t = 0.0
            vo, vn = [], []
            same = True
            for call in calls[kind]:
                old_fn = old["backward" if kind == "bw-strided" else kind]
                o, n = interleaved(lambda: judged(old_fn, call), lambda: judged(new_fn, call),  # noqa: B023
                                   args.repeats)  # fmt: skip
                old_t, new_t = old_t + o, new_t + n
                ro, rn = judged(old_fn, call), judged(new_fn, call)
                vo.append(f"{ro['verdict']}({ro['ndiff']})")
                vn.append(f"{rn['verdict']}({rn['ndiff']})")
                assert rn["verdict"] in ("identical", "bounded"), (config, op, rn)
                same &= same_values(old_fn(call), new_fn(call))
            n = max(len(calls[kind]), 1)
            print(f"{config:7} {kind:10} {len(calls[kind]):5} {old_t / n * 1e3:7.2f}ms "
                  f"{new_t / n * 1e3:7.2f}ms {old_t / max(new_t, 1e-12):7.2f}x  "
                  f"{' '.join(vo):24} {' '.join(vn):24} "
                  f"{'same' if same else 'DIFFER'}")  # fmt: skip


def same_values(old: list[Any], new: list[Any]) -> bool:
    """Whether two emulations' outputs have the same values, bit for bit (NaNs included)."""
    return len(old) == len(new) and all(
        (o is None and n is None) or (o is not None and n is not None and o.value.dtype ==
         n.value.dtype and np.array_equal(o.value.view(f"u{o.value.dtype.itemsize}"),
                                           n.value.view(f"u{n.value.dtype.itemsize}")))
        for o, n in zip(old, new, strict=True))  # fmt: skip


if __name__ == "__main__":
    main()
