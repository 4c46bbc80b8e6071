"""Benchmark: the elementwise, activation, softmax, loss and reduction op emulations against
torch's own CPU kernels on the tensors of a small GPT training step.

Baseline: torch running the same ATen op on the same tensors, measured in the same run. Rows:
one op and dtype each; the ratio is the emulation's median time (from NumPy inputs, judging not
included) over torch's median time. The watcher's budget is a whole step at <= 5x torch's time,
where the GEMMs dominate torch's time; the per-op ratios show which emulations dominate ours.
torch runs on one thread here (a stable baseline on a shared machine).

    python benchmarks/bench_ops_nn.py [--repeats N]
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from timing import median_time  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.validate.ops import Call, lookup
from fpemu.validate.watch.convert import dtype_name, to_numpy

B, T, D, V = 8, 128, 256, 512


def cases(dt: Any) -> list[tuple[str, Any, tuple[Any, ...]]]:
    """(label, op, args) of the activation-sized ops of a GPT step in dtype ``dt``."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(B, T, 4 * D, generator=g).to(dt)
    x = torch.randn(B, T, D, generator=g).to(dt)
    att = torch.randn(B, 4, T, T, generator=g).to(dt)
    logits = torch.randn(B * T, V, generator=g)
    tgt = torch.randint(0, V, (B * T,), generator=g)
    aten = torch.ops.aten
    return [
        ("add", aten.add.Tensor, (x, x)),
        ("mul", aten.mul.Tensor, (x, x)),
        ("div scalar", aten.div.Tensor, (att, 8.0)),
        ("masked_fill", aten.masked_fill.Scalar, (att, att > 0, float("-inf"))),
        ("gelu", aten.gelu.default, (h,)),
        ("sigmoid", aten.sigmoid.default, (h,)),
        ("gelu_backward", aten.gelu_backward.default, (h, h)),
        ("softmax", aten._softmax.default, (att, -1, False)),
        ("softmax_backward", aten._softmax_backward_data.default, (att, att, -1, dt)),
        ("log_softmax f32", aten._log_softmax.default, (logits, 1, False)),
        ("nll_loss f32", aten.nll_loss_forward.default, (logits, tgt, None, 1, -100)),
        ("sum dim0", aten.sum.dim_IntList, (x.reshape(-1, D), [0])),
    ]


def _np(a: Any) -> Any:
    """A tensor as NumPy, a dtype as its name, anything else as it is."""
    if isinstance(a, torch.Tensor):
        return to_numpy(a)
    return dtype_name(a) if isinstance(a, torch.dtype) else a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    repeats = ap.parse_args().repeats
    torch.set_num_threads(1)  # a stable baseline on a shared machine
    cap = str(torch.backends.cpu.get_cpu_capability()).lower()
    print(f"{'op':<18} {'dtype':<9} {'torch ms':>9} {'fpemu ms':>9} {'ratio':>7}")
    for dt in (torch.float32, torch.bfloat16):
        for label, op, args in cases(dt):
            out = op(*args)
            outs = list(out) if isinstance(out, tuple) else [out]
            np_args = tuple(_np(a) for a in args)
            call = Call(str(op), np_args, {}, tuple(dtype_name(t.dtype) for t in outs),
                        capability=cap)  # fmt: skip
            emulation = lookup(str(op))
            assert emulation is not None
            t_torch = median_time(lambda op=op, args=args: op(*args), repeats)
            t_emu = median_time(lambda e=emulation, c=call: e(c), repeats)
            name = str(dt).removeprefix("torch.")
            print(f"{label:<18} {name:<9} {t_torch * 1e3:9.3f} {t_emu * 1e3:9.3f} "
                  f"{t_emu / t_torch:7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
