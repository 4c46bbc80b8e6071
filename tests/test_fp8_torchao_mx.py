"""te_mxfp8 against torchao 0.18's MXFP8 training linear on CPU (issue 15).

torchao 0.18 has no ``MXLinear`` in ``prototype.mx_formats``; its MXFP8 training layer is
``prototype.moe_training.mxfp8_linear.MXFP8Linear``, which runs on CPU with
``kernel_preference=EMULATED`` (RCEIL scales, E4M3 elements, 32-blocks for all three GEMMs,
the transposed operands quantized from the high-precision tensors). Its NVFP4 layers do not
run on CPU (``NVFP4DynamicActivationNVFP4WeightConfig``: "NVFP4 DYNAMIC mode is only
supported on sm100+ machines").

Bit for bit: element bytes and E8M0 scale codes of the six operand copies. torchao's eager
RCEIL takes ``ceil(log2(amax / 448))`` in float32 and can differ by one from TE's bit rule
just above ``448 * 2**k`` (fp8-mx.md §2.1; 3 in 2**20 random amaxes): not hit by this data.
"""

from __future__ import annotations

import numpy as np
import pytest

from fpemu.nn import Tensor
from fpemu.nn.fp8 import FP8State, fp8_linear


def test_mxfp8_linear_step_matches_torchao_operands() -> None:
    torch = pytest.importorskip("torch")
    lin_mod = pytest.importorskip("torchao.prototype.moe_training.mxfp8_linear")
    cfg = pytest.importorskip("torchao.prototype.mx_formats.config")
    mxt = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    torch.manual_seed(0)
    emu, rceil = cfg.KernelPreference.EMULATED, cfg.ScaleCalculationMode.RCEIL
    m = lin_mod.MXFP8Linear(64, 32, bias=False, kernel_preference=emu,
                            scale_calculation_mode=rceil)  # fmt: skip
    x = torch.randn(64, 64, requires_grad=True)
    g = torch.randn(64, 32) * 1e-3
    y = m(x)
    y.backward(g)
    w = m.weight.detach()
    st = FP8State("te_mxfp8")
    xo, wo = Tensor(x.detach().numpy(), requires_grad=True), Tensor(w.numpy(), requires_grad=True)
    yo = fp8_linear(xo, wo, None, recipe="te_mxfp8", state=st)
    yo.backward(g.numpy())

    def theirs(t):  # type: ignore[no-untyped-def]
        q = mxt.MXTensor.to_mx(t.contiguous(), torch.float8_e4m3fn, 32, rceil, emu)
        return q, q.qdata.float().numpy().astype(np.float64), q.scale.view(torch.uint8).numpy()

    xd = x.detach()
    # key -> (torchao's tensor blocked along its last dim, is fpemu's copy transposed?)
    cases = {"input": (xd, False), "weight": (w, True), "grad_output": (g, False),
             "weight_t": (w.t(), True), "grad_output_t": (g.t(), False),
             "input_t": (xd.t(), True)}  # fmt: skip
    deq = {}
    for key, (t, transposed) in cases.items():
        q, data, codes = theirs(t)
        ours = st.last[key][0]
        el, sc = np.asarray(ours.elements), np.asarray(ours.scale_codes)
        if transposed:
            el, sc = el.T, sc.T
        assert np.array_equal(el.view(np.uint64), data.view(np.uint64)), key
        assert np.array_equal(sc, codes), key
        deq[key] = q.dequantize(torch.float32)
    # torchao's emulated GEMMs are float32 torch.mm of the dequantized operands
    ref_y = torch.mm(deq["input"], deq["weight"].t())
    ref_dx = torch.mm(deq["grad_output"], deq["weight_t"].t())
    ref_dw = torch.mm(deq["grad_output_t"], deq["input_t"].t())
    for t, ref in ((y, ref_y), (x.grad, ref_dx), (m.weight.grad, ref_dw)):
        assert torch.equal(t.detach(), ref)
    # fpemu: per-32 block chains (K/32 <= 2 blocks: fast and split agree), scales applied by
    # fma per block (§5.3 order); both sides approximate the same exact sum: the chain
    # truncates below its block's max exponent - 13 (<= 2**-8 of the block's |terms|) and
    # torch's sgemm is within K * 2**-24: 2**-7 of |terms| bounds their difference.
    pairs = (("input", "weight"), ("grad_output", "weight_t"), ("grad_output_t", "input_t"))
    for ours, ref, (a, b) in zip((yo.data, xo.grad, wo.grad), (ref_y, ref_dx, ref_dw), pairs,
                                 strict=True):  # fmt: skip
        terms = torch.mm(deq[a].abs(), deq[b].abs().t()).numpy().astype(np.float64)
        err = np.abs(np.asarray(ours, np.float64) - ref.numpy().astype(np.float64))
        assert np.all(err <= 2.0**-7 * terms)
