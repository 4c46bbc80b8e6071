"""Benchmark: the flash-attention emulations inside real watched bench GPT steps, old (git)
against new, in the same run.

``bench_attention_ops.py`` times each recorded call alone (best of N): there the allocator
serves fresh arrays from pages already mapped. Inside a watched step hundreds of other
emulations run between two attention calls, and a fresh array may cost its page faults. Here
the step (``bench_watch.py``'s GPT, ``FPEMU_PROCESSES=0``: every judgement in this thread)
runs ``--rounds`` times under ``fpemu.watch``, the attention emulations being the module as it
was at ``--base`` in one round and the current one in the next (alternating which goes
first); per op and version: the median and best thread CPU time of a call and its minor page
faults (``getrusage``), over the calls after the first two rounds of each version.
``OMP_NUM_THREADS=1 python benchmarks/bench_attention_step.py [--configs bf16 fp32]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from typing import Any

import bench_watch  # this folder (on sys.path, as are the two below)
from bench_attention_ops import OPS, old_module
from op_calls import TABLE

import fpemu
from fpemu import procpool


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(rows: list[tuple[float, int]], fn: Any) -> Any:
    """``fn`` appending (thread seconds, minor faults) of each call to ``rows``."""

    def run(call: Any) -> Any:
        f0, t0 = _faults(), time.thread_time()
        out = fn(call)
        rows.append((time.thread_time() - t0, _faults() - f0))
        return out

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--base", default="HEAD")
    args = ap.parse_args()
    base = old_module(args.base)
    old = (base.flash_attention, base.flash_attention_backward)
    fns = {"old": dict(zip(OPS.values(), old, strict=True)),
           "new": {op: TABLE[op] for op in OPS.values()}}  # fmt: skip
    print(f"baseline: attention at {args.base}; {args.rounds} watched steps, versions alternating")
    print(
        f"{'config':7} {'op':9} {'version':7} {'median':>9} {'best':>9} {'faults/call':>11} calls"
    )
    os.environ[procpool.ENV] = "0"
    try:
        for config in args.configs:
            model, opt, scaler, batch = bench_watch.make(config)
            rows: dict[tuple[str, str], list[tuple[float, int]]] = {}
            for r in range(args.rounds):
                for tag in ("old", "new") if r % 2 else ("new", "old"):
                    for op in OPS.values():
                        TABLE[op] = _timed(rows.setdefault((tag, op), []), fns[tag][op])
                    with fpemu.watch():
                        bench_watch.step(model, opt, scaler, batch, config)
            for kind, op in OPS.items():
                for tag in ("old", "new"):
                    done = rows[(tag, op)]
                    kept = done[len(done) * 2 // args.rounds :]  # after its first two rounds
                    ts = [t for t, _ in kept]
                    faults = sum(f for _, f in kept) / len(kept)
                    print(f"{config:7} {kind:9} {tag:7} {statistics.median(ts) * 1e3:7.2f}ms "
                          f"{min(ts) * 1e3:7.2f}ms {faults:11.0f} {len(kept)}")  # fmt: skip
    finally:
        os.environ.pop(procpool.ENV, None)
        TABLE.update(fns["new"])


if __name__ == "__main__":
    main()
