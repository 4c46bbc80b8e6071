"""What the per-op benchmarks share (``bench_attention_ops``, ``bench_elementwise_ops``,
``bench_gelu_ops``, ``bench_norm_ops``; imported as ``op_calls`` from this folder): the real
Calls of the bench GPT's watched training step, ``judge_call`` with a given emulation, and a
module's source as it was at a git commit, loaded under another name. Importing it puts this
checkout first on ``sys.path`` (its ``TABLE`` and ``lookup`` are this checkout's).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["TABLE", "bench_args", "capture", "git_show", "judged", "load_source", "lookup",
           "old_table"]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import bench_watch  # noqa: E402  (this folder)

import fpemu  # noqa: E402
from fpemu import procpool  # noqa: E402
from fpemu.validate.ops import TABLE, Call, lookup  # noqa: E402
from fpemu.validate.watch.verdict import judge_call  # noqa: E402


def capture(ops: Iterable[str], config: str, *, warm: int = 0) -> dict[str, list[Call]]:
    """The Calls of the ATen overloads ``ops`` during one watched bench GPT step (``config``:
    bf16, fp16 or fp32), after ``warm`` unwatched steps, all judged in this process. Each is a
    deep copy: torch overwrites an in-place op's storage later."""
    ops = list(ops)
    lookup(ops[0])  # load the registry first
    calls: dict[str, list[Call]] = {op: [] for op in ops}
    saved = {op: TABLE[op] for op in ops}

    def recorder(op: str) -> Any:
        def rec(call: Call) -> Any:
            calls[op].append(copy.deepcopy(call))
            return saved[op](call)

        return rec

    for op in ops:
        TABLE[op] = recorder(op)
    os.environ[procpool.ENV] = "0"
    try:
        model, opt, scaler, batch = bench_watch.make(config)
        for _ in range(warm):
            bench_watch.step(model, opt, scaler, batch, config)
        with fpemu.watch():
            bench_watch.step(model, opt, scaler, batch, config)
    finally:
        os.environ.pop(procpool.ENV, None)
        TABLE.update(saved)
    return calls


def judged(fn: Any, call: Call) -> dict[str, Any]:
    """``judge_call`` of ``call`` with ``fn`` as its op's emulation (the table is restored)."""
    saved = TABLE[call.op]
    TABLE[call.op] = fn
    try:
        return judge_call(call)
    finally:
        TABLE[call.op] = saved


def git_show(base: str, path: str) -> str | None:
    """The text of ``path`` at git commit ``base`` (None where it did not exist)."""
    r = subprocess.run(["git", "-C", str(ROOT), "show", f"{base}:{path}"],
                       capture_output=True, text=True)  # fmt: skip
    return r.stdout if r.returncode == 0 else None


def load_source(name: str, src: str) -> Any:
    """``src`` imported as module ``name`` (put in ``sys.modules``, so later sources can
    import it by that name)."""
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(src)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def old_table(base: str, modules: Iterable[str]) -> dict[str, Any]:
    """The emulations that ``fpemu/validate/ops/<m>.py`` registers for each ``m`` of
    ``modules`` as of git ``base``: each module's source is executed as a throwaway module,
    in order, while ``sys.modules`` holds the old versions of the ones before it (so an old
    ``optim`` gets the old ``fma32``) and the registry is empty; the real registry and modules
    are put back afterwards. A module the base does not have is passed over."""
    pkg = "fpemu.validate.ops"
    lookup("aten.mm.default")  # load the registry first
    saved_table = dict(TABLE)
    saved_mods = {m: sys.modules[f"{pkg}.{m}"] for m in modules if f"{pkg}.{m}" in sys.modules}
    TABLE.clear()
    try:
        for m in modules:
            path = f"fpemu/validate/ops/{m}.py"
            src = git_show(base, path)
            if src is None:
                continue
            mod = types.ModuleType(f"{pkg}.{m}")
            mod.__file__ = f"{base}:{path}"
            sys.modules[f"{pkg}.{m}"] = mod
            exec(compile(src, f"{base}:{path}", "exec"), mod.__dict__)
        return dict(TABLE)
    finally:
        TABLE.clear()
        TABLE.update(saved_table)
        sys.modules.update({f"{pkg}.{m}": mod for m, mod in saved_mods.items()})


def bench_args(doc: str, base: str) -> argparse.Namespace:
    """The command line of an old-against-new per-op benchmark: ``--base`` (git revision of
    the old code, default ``base``), ``--repeats`` (best of, 15), ``--configs`` (bf16 fp32
    fp16); ``doc`` is the script's docstring (its first line describes it)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--base", default=base)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp32", "fp16"])
    return ap.parse_args()
