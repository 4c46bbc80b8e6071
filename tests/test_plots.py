"""fpemu.plots: every figure is written as a real, non-blank PNG; inputs are checked."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread

from fpemu import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_real_png(path: Path) -> None:
    """A PNG file of some size whose pixels are not all one colour."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    pixels = imread(path)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert float(pixels[..., :3].std()) > 0.05  # something was drawn


@pytest.mark.parametrize(
    "formats", [plots.DEFAULT_FORMATS, "bf16", ["e4m3", "e5m2"], ["float32", "tf32"]]
)
def test_representable(tmp_path: Path, formats: object) -> None:
    out = plots.plot_representable(formats, tmp_path / "deep" / "values.png")  # type: ignore[arg-type]
    assert out == tmp_path / "deep" / "values.png"
    assert_real_png(out)


def test_representable_rejects_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fp17"):
        plots.plot_representable(["fp16", "fp17"], tmp_path / "x.png")


def test_gradient_histogram(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    layers = [rng.standard_normal(5000) * 2.0**-20, rng.standard_normal(300) * 2.0**-8, [0.0]]
    out = plots.plot_gradient_histogram(layers, "fp16", tmp_path / "g.png")
    assert_real_png(out)
    out = plots.plot_gradient_histogram(layers[0], "bf16", tmp_path / "g2.png", loss_scale=1024)
    assert_real_png(out)


@pytest.mark.parametrize("scale", [0.0, -2.0, math.inf, math.nan])
def test_gradient_histogram_rejects_bad_scale(tmp_path: Path, scale: float) -> None:
    with pytest.raises(ValueError, match="loss_scale"):
        plots.plot_gradient_histogram([1e-3], "fp16", tmp_path / "g.png", loss_scale=scale)


def test_gradient_histogram_needs_a_nonzero_gradient(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no finite non-zero"):
        plots.plot_gradient_histogram(np.zeros(10), "fp16", tmp_path / "g.png")


def test_band_fractions() -> None:
    # fp16: half the smallest subnormal is 2**-25 ~ 2.98e-8, smallest normal 2**-14 ~ 6.1e-5,
    # max 65504. Zeros are left out of the shares; inf and NaN inputs count as overflow.
    g = [1e-9, -3e-8, 1e-6, 1.0, -2.0, 7e4, np.inf, np.nan, 0.0, 0.0]
    assert plots.band_fractions(g, "fp16") == {
        "zero": 1 / 8,  # 1e-9 (-3e-8 > 2**-25 rounds to -2**-24, a subnormal)
        "subnormal": 2 / 8,
        "normal": 2 / 8,
        "overflow": 3 / 8,
    }
    # float4_e2m1fn has neither inf nor NaN: 7.0 > max 6 saturates, still "overflow".
    assert plots.band_fractions([7.0, 0.2, 1.0], "e2m1")["overflow"] == 1 / 3


def test_auto_loss_scale_is_the_largest_safe_power_of_two() -> None:
    g = np.array([3e-6, -1e-4])
    s = plots.auto_loss_scale(g, "fp16")
    assert math.frexp(s)[0] == 0.5  # a power of two
    assert 1e-4 * s <= 65504 / 2 < 1e-4 * s * 2


def _records(n: int) -> list[SimpleNamespace]:
    return [
        SimpleNamespace(loss=1.0 / (i + 1), scale=2.0 ** (16 - (i % 5 == 4)), skipped=i % 5 == 4)
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "run",
    [
        [1.0, 0.5, 0.3, 0.25, 0.2],
        {"fp32": [1.0, 0.5, 0.3], "bf16": [1.0, 0.6, 0.4]},
        SimpleNamespace(steps=_records(40)),
        np.linspace(1, 0.1, 50),
    ],
    ids=["list", "dict", "records", "array"],
)
def test_training(tmp_path: Path, run: object) -> None:
    assert_real_png(plots.plot_training(run, tmp_path / "t.png"))


def test_training_with_explicit_scale_and_skips(tmp_path: Path) -> None:
    losses = [1.0, 0.8, math.inf, 0.7, 0.6]
    out = plots.plot_training(
        losses,
        tmp_path / "t.png",
        scale=[65536.0, 65536.0, 32768.0, 32768.0, 32768.0],
        skipped=[False, False, True, False, False],
    )
    assert_real_png(out)


@pytest.mark.parametrize(
    ("run", "kwargs", "match"),
    [
        ([1.0, 0.5], {"scale": [1.0]}, "scale has 1 entries but the run has 2 steps"),
        ([1.0, 0.5], {"skipped": [True, False, False]}, "skipped has 3"),
        ([], {}, "no losses"),
        (SimpleNamespace(steps=[]), {}, "empty"),
    ],
)
def test_training_rejects_bad_input(
    tmp_path: Path, run: object, kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        plots.plot_training(run, tmp_path / "t.png", **kwargs)  # type: ignore[arg-type]


def test_missing_matplotlib_gives_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import now raises
    with pytest.raises(ImportError, match=r"pip install 'fpemu\[plot\]'"):
        plots.plot_representable("fp16", tmp_path / "x.png")
