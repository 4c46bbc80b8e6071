"""Benchmark: the watch path of the GELU emulations (``gelu``, ``gelu_backward``), old (git)
against new, judged as the watcher judges them.

Calls: the real ones of the bench GPT step (``bench_watch.py``): the step runs once under
``fpemu.watch`` with ``FPEMU_PROCESSES=0`` and the two emulations wrapped to record their
:class:`~fpemu.validate.ops.Call` (torch's outputs included). Each recorded call is then judged
by :func:`fpemu.validate.watch.verdict.judge_call` with the current activations module and with
the module as it was at ``--base`` (default ``main``; loaded from ``git show`` into a temporary
module, with its ``_erf``/``_iv`` helpers as of the base too), in the same run, old and new
alternating; times are the best of ``--repeats``. Each row also gives both verdicts and how
many elements differ from the emulation's value (the elements whose bound had to be
computed): a new verdict must be ``identical`` or ``bounded``, never ``differs``. A last row
per config judges each ``gelu_backward`` call again with ``x`` made strided (the same values;
torch then runs ATen's kernel, not oneDNN's: the bounded path).
Pin the threads on a shared machine:
``OMP_NUM_THREADS=1 python benchmarks/bench_gelu_ops.py [--configs fp32 bf16 fp16]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timing import best_time  # benchmarks/timing.py (this folder is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import bench_watch  # noqa: E402

import fpemu  # noqa: E402
from fpemu import procpool  # noqa: E402
from fpemu.validate.ops import TABLE, Call, lookup  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge_call  # noqa: E402

OPS = {"forward": "aten.gelu.default", "backward": "aten.gelu_backward.default"}
#: where GELU's emulations live (``activations.py`` before ``gelu.py`` was split out of it)
MODULES = ("fpemu/validate/ops/gelu.py", "fpemu/validate/ops/activations.py")
#: helpers of the module that changed with it, loaded as of the base too (in import order;
#: the ones a base does not have are skipped)
HELPERS = ("fpemu/validate/ops/_iv.py", "fpemu/validate/ops/_erf.py", "fpemu/validate/ops/_fp.py",
           "fpemu/validate/ops/_act.py")  # fmt: skip


def _exists(base: str, path: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{base}:{path}"],
                          capture_output=True).returncode == 0  # fmt: skip


def _base_module(base: str, path: str, name: str, renames: dict[str, str]) -> Any:
    """The module ``path`` as of git ``base``, imported as ``name`` (``sys.modules``), with the
    imports of ``renames``' keys pointed at their base copies."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{base}:{path}"], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    for new, old in renames.items():
        src = src.replace(f"from {new} import", f"from {old} import")
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(src)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


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
            if not _exists(base, helper):
                continue
            name = f"fpemu_base_{helper.rsplit('/', 1)[1][:-3]}"
            _base_module(base, helper, name, renames)
            renames[helper[:-3].replace("/", ".")] = name
        module = next(m for m in MODULES if _exists(base, m))
        _base_module(base, module, "fpemu_base_gelu", renames)
        return {kind: TABLE[op] for kind, op in OPS.items()}
    finally:
        TABLE.clear()
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
    os.environ[procpool.ENV] = "0"
    try:
        model, opt, scaler, batch = bench_watch.make(config)
        with fpemu.watch():
            bench_watch.step(model, opt, scaler, batch, config)
    finally:
        os.environ.pop(procpool.ENV, None)
        TABLE.update(saved)
    return calls


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


def judged(fn: Any, call: Any) -> dict[str, Any]:
    """``judge_call`` with ``fn`` as the op's emulation."""
    saved = TABLE[call.op]
    TABLE[call.op] = fn
    try:
        return judge_call(call)
    finally:
        TABLE[call.op] = saved


def interleaved(old: Any, new: Any, call: Any, repeats: int) -> tuple[float, float]:
    """Best seconds of ``repeats`` judgements with each, alternating (a shared machine's load
    then weighs on both alike)."""
    best_o = best_n = float("inf")
    for _ in range(repeats):
        best_o = min(best_o, best_time(lambda: judged(old, call), 1))
        best_n = min(best_n, best_time(lambda: judged(new, call), 1))
    return best_o, best_n


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
          f"{'old verdicts':24} new verdicts")  # fmt: skip
    for config in args.configs:
        calls = capture(config)
        calls["bw-strided"] = [strided(c) for c in calls["backward"]]
        for kind in (*OPS, "bw-strided"):
            op = OPS.get(kind, OPS["backward"])
            new_fn = TABLE[op]
            old_t = new_t = 0.0
            vo, vn = [], []
            for call in calls[kind]:
                old_fn = old["backward" if kind == "bw-strided" else kind]
                o, n = interleaved(old_fn, new_fn, call, args.repeats)
                old_t, new_t = old_t + o, new_t + n
                ro, rn = judged(old_fn, call), judged(new_fn, call)
                vo.append(f"{ro['verdict']}({ro['ndiff']})")
                vn.append(f"{rn['verdict']}({rn['ndiff']})")
                assert rn["verdict"] in ("identical", "bounded"), (config, op, rn)
            n = max(len(calls[kind]), 1)
            print(f"{config:7} {kind:10} {len(calls[kind]):5} {old_t / n * 1e3:7.2f}ms "
                  f"{new_t / n * 1e3:7.2f}ms {old_t / max(new_t, 1e-12):7.2f}x  "
                  f"{' '.join(vo):24} {' '.join(vn)}")  # fmt: skip


if __name__ == "__main__":
    main()
