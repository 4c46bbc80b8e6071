"""Small classification data sets that need no download: spirals, moons and sklearn's digits.

Each loader returns a :class:`Dataset` with float32 features, int64 labels and a fixed
train/test split. ``spirals`` and ``moons`` are generated here from a seed; ``digits`` is the
8x8 handwritten-digit set of scikit-learn, shipped with fpemu (no extra needed). A data set that
needs an optional package would be listed in :data:`NEEDS`; :func:`unavailable` then says which
extra to install.

>>> d = spirals(n=60, classes=3, seed=0)
>>> d.x_train.shape, d.x_train.dtype.name, d.classes
((48, 2), 'float32', 3)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Features and labels split into train and test parts."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int

    @property
    def features(self) -> int:
        """Number of input features."""
        return int(self.x_train.shape[1])


def _split(name: str, x: np.ndarray, y: np.ndarray, classes: int, seed: int,
           test_fraction: float) -> Dataset:  # fmt: skip
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction!r} must lie in (0, 1)")
    order = np.random.default_rng(seed + 1).permutation(len(x))
    n_test = max(1, round(len(x) * test_fraction))
    te, tr = order[:n_test], order[n_test:]
    x = x.astype(np.float32)
    y = y.astype(np.int64)
    return Dataset(name, x[tr], y[tr], x[te], y[te], classes)


def _check_n(n: int, classes: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2 * classes:
        raise ValueError(f"n must be an int >= {2 * classes} (2 per class), got {n!r}")


def spirals(*, n: int = 600, classes: int = 3, noise: float = 0.2, seed: int = 0,
            test_fraction: float = 0.2) -> Dataset:  # fmt: skip
    """``classes`` interleaved 2-D spiral arms (the CS231n toy set), with Gaussian noise.

    >>> spirals(n=30, classes=3).y_train.max()
    np.int64(2)
    """
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an int >= 2, got {classes!r}")
    _check_n(n, classes)
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    r = rng.uniform(0.05, 1.0, n)
    theta = y * (2 * np.pi / classes) + r * 4.0 + rng.normal(0, noise, n)
    x = np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1)
    return _split("spirals", x, y, classes, seed, test_fraction)


def moons(*, n: int = 600, noise: float = 0.1, seed: int = 0,
          test_fraction: float = 0.2) -> Dataset:  # fmt: skip
    """Two interleaving half circles (like sklearn's ``make_moons``), own seeded code.

    >>> moons(n=20).classes
    2
    """
    _check_n(n, 2)
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    t = rng.uniform(0, np.pi, n)
    x = np.where(y[:, None] == 0, np.stack([np.cos(t), np.sin(t)], 1),
                 np.stack([1 - np.cos(t), 0.5 - np.sin(t)], 1))  # fmt: skip
    x = x + rng.normal(0, noise, x.shape)
    return _split("moons", x, y, 2, seed, test_fraction)


def digits(*, seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's 8x8 digits (1797 images, 10 classes), pixels scaled to [0, 1].

    The images ship with fpemu (``fpemu/training/data/digits.npz``, scikit-learn's BSD licence
    beside it), so no extra is needed; the copy is checked against scikit-learn in the tests.

    >>> d = digits()
    >>> d.features, d.classes, len(d.x_train) + len(d.x_test)
    (64, 10, 1797)
    """
    with resources.files("fpemu.training").joinpath("data/digits.npz").open("rb") as fh:
        data = np.load(fh)
        images, labels = data["images"], data["labels"]
    return _split("digits", images.astype(np.float64) / 16.0, labels.astype(np.int64), 10, seed,
                  test_fraction)  # fmt: skip


#: Loaders by name.
DATASETS: dict[str, Callable[..., Dataset]] = {"spirals": spirals, "moons": moons, "digits": digits}

#: Data sets that need an optional package: name -> (module, pip extra, package on PyPI).
#: (None today: digits ships with fpemu; the mechanism stays for data sets that cannot.)
NEEDS: dict[str, tuple[str, str, str]] = {}


def unavailable(name: str) -> str | None:
    """Why data set ``name`` cannot be loaded here (a missing extra), or None when it can.

    >>> unavailable("spirals") is None
    True
    """
    if name not in NEEDS:
        return None
    module, extra, package = NEEDS[name]
    try:
        importlib.import_module(module)
    except ImportError:  # not installed, or hidden (sys.modules[module] = None)
        return f"the {name} data set needs {package}: pip install 'fpemu[{extra}]'"
    return None


def get_dataset(name: str | Dataset, *, seed: int = 0) -> Dataset:
    """A data set by name (``spirals``, ``moons``, ``digits``), or a Dataset unchanged.

    >>> get_dataset("moons").name
    'moons'
    """
    if isinstance(name, Dataset):
        return name
    if name not in DATASETS:
        raise ValueError(f"unknown dataset={name!r}; choose one of {', '.join(DATASETS)}")
    return DATASETS[name](seed=seed)
