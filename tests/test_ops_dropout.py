"""fpemu.validate.ops.dropout against torch 2.13's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup, names  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.ops_nn_util import check, inputs, rerun  # noqa: E402
from tests.watch_ops_util import capability, one_ulp_off  # noqa: E402

aten = torch.ops.aten
DT = ("float32", "bfloat16", "float16", "float64")


def forward(x: object, p: float, train: bool) -> tuple[list[np.ndarray], list[object]]:
    out, mask = aten.native_dropout.default(x, p, train)
    outs = [to_numpy(out), to_numpy(mask)]
    call = Call("aten.native_dropout.default", (to_numpy(x), p, train), {},
                (str(out.dtype)[6:], "bool"), capability=capability(),
                options={"outputs": outs})  # fmt: skip
    emulation = lookup("aten.native_dropout.default")
    assert emulation is not None
    return outs, list(emulation(call))


@pytest.mark.parametrize("name", DT)
@pytest.mark.parametrize("p", [0.1, 0.3, 1 / 3, 0.5, 0.9])
def test_native_dropout_given_the_mask(name: str, p: float) -> None:
    x = inputs(name, 3000, seed=int(p * 100))
    outs, em = forward(x, p, True)
    assert em[1] is None  # the mask: a random draw, not judged
    assert judge(outs[0], em[0]).verdict == "identical"
    kept = np.flatnonzero(outs[1] & np.isfinite(outs[0].astype(np.float64)) & (outs[0] != 0))
    assert judge(one_ulp_off(outs[0], int(kept[0])), em[0]).verdict == "differs"
    g = inputs(name, 3000, seed=7)
    check(aten.native_dropout_backward.default, g, torch.from_numpy(outs[1]), 1 / (1 - p))


def test_eval_mode_and_missing_outputs() -> None:
    x = torch.randn(50)
    outs, em = forward(x, 0.3, False)
    assert [judge(o, e).verdict for o, e in zip(outs, em, strict=True)] == ["identical"] * 2
    emulation = lookup("aten.native_dropout.default")
    assert emulation is not None
    with pytest.raises(NotImplementedError, match="outputs"):
        emulation(Call("aten.native_dropout.default", (x.numpy(), 0.3, True), {},
                       ("float32", "bool")))  # fmt: skip


def test_registered() -> None:
    have = set(names())
    for op in ("aten.native_dropout.default", "aten.native_dropout_backward.default"):
        assert op in have, op


def test_capabilities() -> None:
    """The same claims hold under ATEN_CPU_CAPABILITY=default and avx2 (subprocesses)."""
    rerun(__file__)
