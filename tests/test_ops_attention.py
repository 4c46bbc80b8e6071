"""Flash-attention (CPU SDPA) emulations against torch's kernels: every output within the
derived bound, on random and adversarial inputs, and a fault beyond the bound is caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, Out, lookup, names  # noqa: E402
from fpemu.validate.ops._num import fmt as _fmt  # noqa: E402
from fpemu.validate.ops._num import ulp  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import emulate  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
FWD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
BWD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default

# (q length, kv length, head dim, causal, mask, logit magnitude): a kv length of 600 spans two
# 512-key blocks (the online rescaling); magnitude 8 gives logits of ~100 (exp underflow)
CASES = [
    (8, 8, 16, True, False, 1.0),
    (37, 37, 8, True, False, 3.0),
    (20, 600, 16, False, False, 1.0),
    (16, 16, 64, False, True, 1.0),
    (40, 40, 32, True, False, 8.0),
    (200, 200, 8, True, False, 1.0),  # 64-row q blocks
]


def _inputs(dt: torch.dtype, case: tuple[object, ...], seed: int) -> tuple[object, ...]:
    lq, lk, d, causal, mask, mag = case
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(2, 2, lq, d, generator=g) * mag).to(dt)
    k = (torch.randn(2, 2, lk, d, generator=g) * mag).to(dt)
    v = torch.randn(2, 2, lk, d, generator=g).to(dt)
    kw = {"attn_mask": torch.randn(lq, lk, generator=g).to(dt)} if mask else {}
    go = torch.randn(2, 2, lq, d, generator=g).to(dt)
    return q, k, v, causal, kw, go


def _run(fn: object, *args: object, **kw: object) -> object:
    """Call torch, skipping where torch itself cannot run the kernel on this capability (its
    bf16 blocked path needs AVX512: 'pack_vnni2 is only supported when avx512 is supported')."""
    try:
        return fn(*args, **kw)  # type: ignore[operator]
    except RuntimeError as exc:
        if "only supported when avx512" in str(exc):
            pytest.skip(f"torch cannot run this on {torch.backends.cpu.get_cpu_capability()}")
        raise


def _ok(outs: list[object], emulated: list[Out | None]) -> list[str]:
    res = []
    for t, e in zip(outs, emulated, strict=True):
        assert e is not None and not e.exact
        res.append(judge(to_numpy(t), e).verdict)
    return res


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_flash_attention_forward_and_backward_bounded(dt: torch.dtype, case: tuple) -> None:
    q, k, v, causal, kw, go = _inputs(dt, case, 0)
    outs, em = _run(emulate, FWD, q, k, v, 0.0, causal, **kw)
    assert set(_ok(outs, em)) <= {"identical", "bounded"}
    outs2, em2 = emulate(BWD, go, q, k, v, outs[0], outs[1], 0.0, causal, **kw)
    assert set(_ok(outs2, em2)) <= {"identical", "bounded"}


def test_flash_attention_explicit_scale_bounded() -> None:
    q, k, v, _, _, go = _inputs(torch.float32, (12, 12, 8, False, False, 1.0), 3)
    outs, em = emulate(FWD, q, k, v, 0.0, False, scale=0.3)
    assert set(_ok(outs, em)) <= {"identical", "bounded"}
    outs2, em2 = emulate(BWD, go, q, k, v, outs[0], outs[1], 0.0, False, scale=0.3)
    assert set(_ok(outs2, em2)) <= {"identical", "bounded"}


def test_fully_masked_row_is_zero_exactly() -> None:
    q, k, v, _, _, _ = _inputs(torch.float32, (4, 4, 8, False, False, 1.0), 4)
    mask = torch.zeros(4, 4)
    mask[2] = -float("inf")
    outs, em = emulate(FWD, q, k, v, 0.0, False, attn_mask=mask)
    assert float(outs[0][:, :, 2].abs().max()) == 0.0 and float(outs[1][:, :, 2].abs().max()) == 0.0
    assert set(_ok(outs, em)) <= {"identical", "bounded"}


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_a_fault_beyond_the_bound_differs(dt: torch.dtype) -> None:
    """Moving one output element by twice its bound (plus a rounding) is caught, and so is
    an attention computed without the causal mask."""
    q, k, v, _, _, go = _inputs(dt, CASES[1], 1)
    outs, em = emulate(FWD, q, k, v, 0.0, True)
    for t, e in zip(outs, em, strict=True):
        assert e is not None and e.err is not None and e.center is not None
        bad = to_numpy(t).copy()
        i = 5
        c = float(e.center.reshape(-1)[i])
        err = float(np.broadcast_to(np.asarray(e.err), bad.shape).reshape(-1)[i])
        step = float(ulp(c, _fmt(bad)))
        bad.reshape(-1)[i] = c + 2 * err + 3 * step  # outside center +- err by > one rounding
        assert judge(bad, e).verdict == "differs"
    wrong = FWD(q, k, v, 0.0, False)  # not causal
    assert judge(to_numpy(wrong[0]), em[0]).verdict == "differs"
    _, em2 = emulate(BWD, go, q, k, v, outs[0], outs[1], 0.0, True)
    wrong2 = BWD(go, q, k, v, outs[0], outs[1], 0.0, False)
    assert "differs" in [
        judge(to_numpy(t), e).verdict for t, e in zip(wrong2, em2, strict=True) if e is not None
    ]


def test_bf16_probabilities_are_rounded_before_pv() -> None:
    """The finding: bf16 output error is of the order of bf16's rounding of p (not of the
    float32 GEMM): with p rounded to bf16 the measured output is much closer than without."""
    q, k, v, _, _, _ = _inputs(torch.bfloat16, (64, 64, 16, False, False, 1.0), 2)
    out, _ = _run(FWD, q, k, v, 0.0, False)
    qd, kd, vd = (x.double() for x in (q, k, v))
    s = (qd @ kd.transpose(-1, -2)) * float(np.float32(0.25))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    exact = (p @ vd) / p.sum(-1, keepdim=True)
    rounded = (p.to(torch.bfloat16).double() @ vd) / p.sum(-1, keepdim=True)
    t = out.double()
    assert float((t - rounded.to(torch.bfloat16).double()).abs().max()) < float(
        (t - exact.to(torch.bfloat16).double()).abs().max()
    ) or torch.equal(rounded.to(torch.bfloat16), exact.to(torch.bfloat16))


def test_dropout_is_refused() -> None:
    """torch's CPU flash kernel refuses dropout itself; the emulation refuses it too rather
    than judge a random mask."""
    q = np.zeros((1, 1, 2, 4), np.float32)
    call = Call(str(FWD), (q, q, q, 0.5, False), {}, ("float32", "float32"))
    with pytest.raises(NotImplementedError, match=r"dropout_p=0\.5"):
        lookup(str(FWD))(call)


def test_registered() -> None:
    have = set(names())
    for op in (
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    ):
        assert op in have


@pytest.mark.parametrize("case", CASES[:5], ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_emulate_value_is_the_watch_center(dt: torch.dtype, case: tuple) -> None:
    """Under emulate (call.model set) only the value is computed: it equals, bit for bit, the
    value watch derives its bound around (the same float64 center rounded once), forward and
    backward, masks and fully masked rows included; its bound is not claimed (infinite)."""
    q, k, v, causal, kw, go = _inputs(dt, case, 5)
    if "attn_mask" in kw:
        kw["attn_mask"][2] = -float("inf")  # a fully masked row
    for op, args in ((FWD, (q, k, v, 0.0, causal)), (BWD, None)):
        if args is None:
            out, lse = _run(FWD, q, k, v, 0.0, causal, **kw)
            args = (go, q, k, v, out, lse, 0.0, causal)
        outs, watched = _run(emulate, op, *args, **kw)
        np_args = tuple(to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args)
        np_kw = {n: to_numpy(t) for n, t in kw.items()}
        call = Call(str(op), np_args, np_kw, tuple(_fmt(to_numpy(t)) for t in outs))
        emulated = lookup(str(op))(dataclasses.replace(call, model="fast"))
        for w, e in zip(watched, emulated, strict=True):
            assert w is not None and e is not None and np.isinf(e.err).all()
            assert w.value.dtype == e.value.dtype
            assert (w.value.view(np.uint8) == e.value.view(np.uint8)).all()
