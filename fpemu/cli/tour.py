"""``fpemu tour``: a guided terminal tour of the lessons fpemu teaches, in numbers and bits.

Each lesson is a small function that computes its numbers with fpemu and prints them; the tour
needs no GPU and runs in seconds.

>>> import io
>>> from rich.console import Console
>>> buf = io.StringIO()
>>> lesson_swamping(Console(file=buf, width=100))
>>> "1 + 0.0001" in buf.getvalue()
True
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import ml_dtypes
import numpy as np
from rich.console import Console
from rich.table import Table

import fpemu
from fpemu.amp.scaling import get_scaler
from fpemu.cli.args import int_at_least
from fpemu.rounding import RoundMode
from fpemu.tensorcore.compare import compare


def _bits(x: float, fmt: str) -> str:
    f = fpemu.get_format(fmt)
    code = int(fpemu.encode(float(fpemu.round(x, f)), f))
    s = format(code, f"0{f.bits}b")
    return f"{s[0]} {s[1 : 1 + f.ebits]} {s[1 + f.ebits :]}"


def lesson_formats(con: Console) -> None:
    """The formats side by side: range (max, tiny) against precision (eps)."""
    t = Table(title="1. Formats: range versus precision", title_justify="left")
    for col in ("format", "bits", "exp", "frac", "max", "smallest normal", "eps = ulp(1)"):
        t.add_column(col, justify="right")
    for name in ("float32", "tf32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"):
        f = fpemu.get_format(name)
        t.add_row(
            name,
            str(f.bits),
            str(f.ebits),
            str(f.mbits),
            f"{f.max:.4g}",
            f"{f.tiny:.3g}",
            f"{f.eps:.3g}",
        )
    con.print(t)
    con.print("FP16 spends bits on precision, BF16 on range (the same exponent as FP32).\n")


def lesson_swamping(con: Console) -> None:
    """Why 1 + 0.0001 == 1 in FP16: the addend is below half an ulp of 1."""
    con.print("[bold]2. Swamping: 1 + 0.0001 in FP16[/bold]")
    u = float(fpemu.ulp(1.0, "fp16"))
    r = float(fpemu.round(1 + 0.0001, "fp16"))
    con.print(f"   ulp(1) in FP16 = 2**-10 = {u}; 0.0001 < {u / 2}, half of it")
    con.print(f"   round(1 + 0.0001, fp16) = {r}   bits {_bits(r, 'fp16')}")
    acc = 1.0
    for _ in range(10_000):
        acc = float(fpemu.round(acc + 0.0001, "fp16"))
    con.print(f"   adding 0.0001 ten thousand times to 1 in FP16 gives {acc} (exact: 2.0)")
    con.print(
        f"   the same in BF16 gives {float(fpemu.round(1 + 0.0001, 'bf16'))} after one step: "
        "BF16 has even less precision.\n"
    )


def lesson_underflow(con: Console) -> None:
    """Why 1e-4 * 1e-4 == 0 in FP16: the product is below the smallest subnormal."""
    con.print("[bold]3. Underflow: 1e-4 * 1e-4 in FP16[/bold]")
    a = float(fpemu.round(1e-4, "fp16"))
    p = a * a
    for fmt in ("fp16", "bf16"):
        f = fpemu.get_format(fmt)
        r = float(fpemu.round(p, fmt))
        con.print(f"   {fmt}: product {p:.4e}, smallest subnormal {f.smallest_subnormal:.3e}"
                  f" -> {r:.6g}")  # fmt: skip
    con.print("   Small gradients die this way in FP16; loss scaling shifts them back\n"
              "   into range.\n")  # fmt: skip


def lesson_modes(con: Console) -> None:
    """One value, every rounding mode."""
    t = Table(title="4. Rounding 0.1 to BF16 in every mode", title_justify="left")
    t.add_column("mode")
    t.add_column("result", justify="right")
    t.add_column("error", justify="right")
    t.add_column("bits (s e m)")
    for m in RoundMode:
        rng = np.random.default_rng(0) if m is RoundMode.STOCHASTIC else None
        r = float(fpemu.round(0.1, "bf16", mode=m, rng=rng))
        t.add_row(m.value, repr(r), f"{r - 0.1:+.2e}", _bits(r, "bf16"))
    con.print(t)
    con.print("")


def lesson_double_rounding(con: Console) -> None:
    """Rounding float64 through float32 first can give a different (wrong) answer."""
    x = 1 + 2**-8 + 2**-40
    ours = float(fpemu.round(x, "bf16"))
    # float64 -> float32 -> bfloat16, as torch's CPU casts a double (ml_dtypes' own float64
    # astype rounds once since 0.7; before, it went through float32 too)
    via32 = float(np.array([x], np.float32).astype(ml_dtypes.bfloat16)[0])
    con.print("[bold]5. Double rounding: float64 -> bfloat16[/bold]")
    con.print("   x = 1 + 2**-8 + 2**-40 lies just above the midpoint between 1 and 1.0078125")
    con.print(f"   fpemu (directly from float64): {ours}")
    con.print(f"   via float32 first (x.float().bfloat16()): {via32}")
    con.print("   float32 keeps 1 + 2**-8, exactly the midpoint; its tie goes to even\n")


def lesson_accumulation(con: Console) -> None:
    """The same FP16 inputs, FP32 accumulation in four orders, beside the exact answer."""
    a = np.concatenate([[1.0], np.full(4096, 2.0**-24)])[None, :]
    b = np.ones((a.shape[1], 1))
    t = Table(
        title="6. Summing 1 + 4096 x 2**-24 (FP16 inputs, FP32 accumulator)", title_justify="left"
    )
    for col in ("model", "result", "error (ulps of FP32)", "within n*u bound"):
        t.add_column(col, justify="right")
    exact = fpemu.exact_matmul(a, b, fmt="fp16").to_float()[0, 0]
    t.add_row("exact", repr(float(exact)), "0", "")
    for row in fpemu.compare_models(
        a, b, fmt="fp16", acc="fp32", models=("sequential", "pairwise", "blocked", "fast")
    ):
        t.add_row(
            row.model,
            repr(float(row.result[0, 0])),
            f"{row.max_ulp_error:.0f}",
            "yes" if row.bound_ratio <= 1 else "NO",
        )
    con.print(t)
    con.print(
        "   Each tiny term is below half an FP32 ulp of the running sum, so a sequential\n"
        "   loop never moves; summing small terms first (pairwise) keeps them.\n"
    )


def lesson_tensor_cores(con: Console) -> None:
    """A Tensor Core's block adder truncates: its FP32 result differs from a sequential loop."""
    rng = np.random.default_rng(1)
    for _ in range(50):  # find a small FP16 problem where the models disagree
        a = fpemu.round(rng.standard_normal((1, 16)), "fp16")
        spread = 2.0 ** rng.integers(-12, 12, (16, 1))
        b = fpemu.round(rng.standard_normal((16, 1)) * spread, "fp16")
        r = compare(a, b, fmt="fp16", arch="h100")
        if r.tensor_core[0, 0] != r.sequential[0, 0]:
            break
    con.print(
        "[bold]7. Tensor Cores (H100 model): one 16-term FP16 dot product, FP32 output[/bold]"
    )
    con.print(f"   exact            {float(r.exact[0, 0])!r}")
    con.print(
        f"   H100 tensor core {float(r.tensor_core[0, 0])!r}  "
        f"({float(r.tensor_core_ulps[0, 0]):+.3g} ulps: aligned to the largest"
        "\n                    term, then truncated)"
    )
    con.print(
        f"   sequential FP32  {float(r.sequential[0, 0])!r}  "
        f"({float(r.sequential_ulps[0, 0]):+.3g} ulps: one rounding per step)"
    )
    con.print("   `fpemu tensorcore` compares any inputs on v100, t4, a100, ada, h100 or b200.\n")


class _OneWeight:
    """A one-parameter SGD "optimizer" (``.params`` with ``.grad``, ``.step()``) for a scaler."""

    def __init__(self) -> None:
        self.params = [self]
        self.data = np.float32(1.0)
        self.grad: np.ndarray | None = None

    def step(self) -> None:
        assert self.grad is not None
        self.data = np.float32(self.data - np.float32(0.01) * self.grad[0])


def _scaler_story(name: str, **options: object) -> tuple[str, float]:
    """log2(scale) per step ('!' overflow, 's' skipped) and the final weight, scripted run."""
    scaler, w, cells = get_scaler(name, **options), _OneWeight(), []
    for g in (0.25, 0.25, 0.25, 0.25, 0.25, 300.0, 0.25, 0.25):  # a spike at step 5
        scale = float(scaler.scale(np.float32(1.0)))
        with np.errstate(over="ignore", invalid="ignore"):
            w.grad = np.asarray(fpemu.round(np.float32(g * scale), "fp16"), np.float32)[None]
            scaler.step(w)
        rec = scaler.update()
        assert rec is not None
        mark = ("!" if rec.found_inf else "") + ("s" if rec.skipped else "")
        cells.append(f"{np.log2(scale):g}{mark}".ljust(4))
    return " ".join(cells), float(w.data)


def lesson_loss_scaling(con: Console) -> None:
    """Small gradients underflow FP16; multiplying the loss by 2**16 brings them back; the two
    scaler mistakes people write (tutorial scaler, GradScaler built every step) beside torch's."""
    g = np.exp(np.random.default_rng(0).normal(np.log(1e-7), 2.0, 100_000))  # typical tiny grads
    con.print("[bold]8. Loss scaling: 100 000 gradients around 1e-7[/bold]")
    for fmt, scale in (("fp16", 1.0), ("fp16", 2.0**16), ("bf16", 1.0)):
        lost = float(np.mean(fpemu.round(g * scale, fmt) == 0))
        con.print(f"   {fmt} with loss scale {scale:>7g}: {lost:6.1%} of the gradients become 0")
    con.print("   Gradient 0.25 (300 at step 5) times the scale, in fp16; log2(scale) per")
    con.print("   step (! overflow, s skipped), then the weight (1.0 at the start):")
    for label, name, options in (
        ("GradScaler, growth_interval=2", "torch", {"growth_interval": 2}),
        ("tutorial: step, then check", "tutorial", {}),
        ("tutorial, with skipping", "tutorial_skip", {}),
        ("GradScaler() every step", "fresh_gradscaler", {}),
    ):
        story, weight = _scaler_story(name, **options)
        con.print(f"   {label:29} {story} {weight:g}")
    con.print(
        "   GradScaler halves on overflow, skips that step, grows after clean steps.\n"
        "   The tutorial scaler applies the inf gradient before it checks: the weight\n"
        "   is lost. With skipping it still doubles every step, so every other step\n"
        "   overflows. A GradScaler built every step stays at 2**16: it never adapts.\n"
        "   See the docs page 'Loss scaling and master weights'.\n"
    )


LESSONS: list[Callable[[Console], None]] = [
    lesson_formats,
    lesson_swamping,
    lesson_underflow,
    lesson_modes,
    lesson_double_rounding,
    lesson_accumulation,
    lesson_tensor_cores,
    lesson_loss_scaling,
]


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpemu tour``."""
    parser.add_argument("--width", type=int_at_least(40), default=None,
                        help="terminal width, at least 40 columns (default: auto)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Print every lesson."""
    con = Console(width=args.width)
    con.rule("[bold]fpemu tour: what low-precision arithmetic really does[/bold]")
    for lesson in LESSONS:
        lesson(con)
    con.rule("see `fpemu --help` for the other commands")
    return 0
