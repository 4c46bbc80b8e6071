"""Check: ``fpemu.watch``'s rows are the same as at git ``--base`` (a speed change must not move a
verdict, a count or a reported value).

Runs the bench GPT (``bench_watch.py``) in bf16, fp16 and fp32 and every model of the watch
zoo (``tests/watch_zoo.py``) in its three configurations, 3 steps each, under ``fpemu.watch``
with everything judged in this process (``FPEMU_PROCESSES=0``; ``--worker`` judges with the
worker process instead), here and in a temporary git worktree of ``--base`` (a subprocess with
that tree first on ``PYTHONPATH``), and compares every row field by field (floats by their
bits, NaN equal to NaN) and the procedure findings. Exits 1 on any difference, printing the
first ones. ``--models`` picks some (default: all), ``--seeds`` the zoo's seeds (default 0).

``python benchmarks/check_rows.py --base HEAD~1`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def dump(root: str, models: list[str], seeds: list[int], out: str) -> None:
    """Watch each model's 3 steps with the ``fpemu``, bench and zoo of the tree ``root`` and
    pickle the rows."""
    sys.path[:0] = [root, os.path.join(root, "benchmarks")]
    import bench_watch  # noqa: PLC0415 (root's; it puts root first again)
    import torch  # noqa: PLC0415

    import fpemu  # noqa: PLC0415
    from tests import watch_zoo  # noqa: PLC0415

    torch.set_num_threads(1)
    result: dict[str, Any] = {"fpemu": fpemu.__file__}
    for name in models:
        for seed in seeds:
            if name.startswith("bench_"):
                config = name.removeprefix("bench_")
                model, opt, scaler, batch = bench_watch.make(config)
                with fpemu.watch() as w:
                    for _ in range(3):
                        bench_watch.step(model, opt, scaler, batch, config)
                key = name
            else:
                zoo, config = name.split("/")
                model, opt, scaler, batches = watch_zoo.setup(zoo, config, seed)
                with fpemu.watch() as w:
                    for b in batches:
                        watch_zoo.train_step(zoo, config, model, opt, scaler, b)
                key = f"{name}/{seed}"
            r = w.report()
            result[key] = (r.rows, r.procedure)
            if name.startswith("bench_"):
                break  # one seed of its own
    with open(out, "wb") as f:
        pickle.dump(result, f)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a.hex() == b.hex()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The differences (each a line), model by model, row by row, field by field."""
    out = []
    for key, (rn, pn) in ((k, v) for k, v in new.items() if k != "fpemu"):
        if key not in old:
            out.append(f"{key}: not in the base's run")
            continue
        ro, po = old[key]
        if len(ro) != len(rn):
            out.append(f"{key}: {len(ro)} rows at the base, {len(rn)} now")
        for i, (a, b) in enumerate(zip(ro, rn, strict=False)):
            if not _same(a, b):
                fields = sorted(k for k in a.keys() | b.keys() if not _same(a.get(k), b.get(k)))
                diffs = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in fields)
                out.append(f"{key} row {i} ({b.get('op')}): {diffs}")
        if not _same(po, pn):
            out.append(f"{key}: procedure findings {po!r} -> {pn!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare with (HEAD)")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--seeds", nargs="*", type=int, default=[0])
    ap.add_argument("--worker", action="store_true", help="judge with the worker process")
    ap.add_argument("--show", type=int, default=40, help="differences printed (40)")
    ap.add_argument("--dump", help=argparse.SUPPRESS)
    ap.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.models is None:
        sys.path.insert(0, str(ROOT))
        from tests import watch_zoo  # noqa: PLC0415

        zoo = [f"{m}/{c}" for m in watch_zoo.ZOO for c in watch_zoo.CONFIGS]
        args.models = ["bench_bf16", "bench_fp16", "bench_fp32", *zoo]
    if not args.worker:
        os.environ["FPEMU_PROCESSES"] = "0"
    if args.dump:
        dump(args.root, args.models, args.seeds, args.dump)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", tree,
                        args.base], check=True)  # fmt: skip
        try:
            files = {}
            for who, root in (("base", tree), ("now", str(ROOT))):
                files[who] = os.path.join(tmp, f"{who}.pkl")
                # (the same string hashes in both runs: set order must not tell the runs apart)
                env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
                cmd = [sys.executable, str(HERE / "check_rows.py"), "--dump", files[who],
                       "--root", root, "--seeds", *map(str, args.seeds),
                       "--models", *args.models]  # fmt: skip
                if args.worker:
                    cmd.append("--worker")
                subprocess.run(cmd, check=True, env=env, cwd=root)
            runs = {}
            for who, path in files.items():
                with open(path, "rb") as f:
                    runs[who] = pickle.load(f)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", tree],
                           check=False)  # fmt: skip
    print(f"base {args.base}: {runs['base']['fpemu']}\nnow: {runs['now']['fpemu']}")
    diffs = compare(runs["base"], runs["now"])
    n_rows = sum(len(v[0]) for k, v in runs["now"].items() if k != "fpemu")
    print(f"{len(runs['now']) - 1} runs, {n_rows} rows: {len(diffs)} differences")
    for line in diffs[: args.show]:
        print("  " + line)
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
