"""The FMA of oneDNN's GELU-backward emulation (``_onednn_bwd._fma``: a float64 sum with only
its float32 midpoints redone) against the exact oracle (``reference.arith.fma``), bit for bit,
on the triples whose exact result is 0 or normal (its stated domain), and its kernel choice."""

from __future__ import annotations

import numpy as np
import pytest

from fpemu.validate.ops import _onednn_bwd
from tests.test_ops_fma_fast import adversarial, oracle, same_bits


def test_fma_against_the_exact_oracle() -> None:
    a, b, c = adversarial()
    g = np.random.default_rng(5)
    ra = g.standard_normal(2000).astype(np.float32)
    rb = g.uniform(0, 1, 2000).astype(np.float32)
    rc = (-(ra.astype(np.float64) * rb) * (1 + 1e-7 * g.standard_normal(2000))).astype(np.float32)
    a, b, c = np.concatenate([a, ra]), np.concatenate([b, rb]), np.concatenate([c, rc])
    with np.errstate(all="ignore"):
        want = oracle(a, b, c)
        keep = np.isfinite(want) & ((want == 0) | (np.abs(want) > 2.0**-125))
        keep &= np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        assert keep.sum() > 2000  # the midpoint cases of ``adversarial`` are among them
        same_bits(_onednn_bwd._fma(a[keep], b[keep], c[keep]), want[keep])
        same_bits(_onednn_bwd._fma(a[keep], b[keep][0], c[keep][0]), oracle(a[keep], b[keep][0],
                                                                           c[keep][0]))  # fmt: skip


@pytest.mark.parametrize(
    ("cap", "flags", "want"),
    [("", {"sse4_1", "avx2", "fma"}, True), ("", {"sse4_1", "avx"}, False),
     ("AVX", {"sse4_1", "avx2", "fma"}, False), ("SSE41", {"sse4_1", "avx2", "fma"}, False),
     ("AVX512_CORE", {"sse4_1", "avx2", "fma"}, True), ("", {"avx2", "fma"}, None),
     ("NOT_AN_ISA", {"sse4_1", "avx2", "fma"}, None), ("", {"sse4_1", "avx2"}, None)],
)  # fmt: skip
def test_kernel_choice(monkeypatch: pytest.MonkeyPatch, cap: str, flags: set[str],
                       want: bool | None) -> None:  # fmt: skip
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(_onednn_bwd, "_flags", lambda: frozenset(flags))
    assert _onednn_bwd.kernel_fused() is want
    if cap:  # the old name of the variable, set to another cap: not known
        monkeypatch.setenv("DNNL_MAX_CPU_ISA", "SSE41" if cap != "SSE41" else "AVX2")
        assert _onednn_bwd.kernel_fused() is None
    else:  # the old name alone is obeyed
        monkeypatch.setenv("DNNL_MAX_CPU_ISA", "SSE41")
        assert _onednn_bwd.kernel_fused() is (False if "sse4_1" in flags else None)
