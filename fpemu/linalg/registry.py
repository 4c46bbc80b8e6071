"""The registry of accumulation models: one name (and aliases) per model function.

>>> from fpemu.linalg import get_model, models
>>> get_model("seq") is get_model("sequential")
True
>>> "pairwise" in models()
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
#: An accumulation model, see :mod:`fpemu.linalg.ops` for the contract.
Model = Callable[..., Any]


@dataclass(frozen=True)
class ModelInfo:
    """A registered accumulation model."""

    #: Canonical name.
    name: str
    #: The model function.
    fn: Model
    #: Other names that resolve to it.
    aliases: tuple[str, ...]
    #: One-line description shown by :func:`models`.
    description: str


_MODELS: dict[str, ModelInfo] = {}
_MODEL_ALIASES: dict[str, str] = {}


def register_model(
    name: str,
    fn: Model,
    *,
    aliases: tuple[str, ...] | list[str] = (),
    description: str = "",
    replace: bool = False,
) -> None:
    """Make an accumulation model available to :func:`matmul` under ``name`` and ``aliases``.

    Args:
        name: canonical name (case-insensitive).
        fn: the model, ``fn(a, b, c, *, fmt, acc, out, **options) -> float64 ndarray``.
        aliases: other accepted names.
        description: one line for :func:`models`.
        replace: allow re-registering an existing name (otherwise ValueError).

    Raises:
        TypeError: ``name`` is not a str or ``fn`` is not callable.
        ValueError: the name or an alias is taken (and ``replace`` is False).

    >>> register_model("my_seq", get_model("sequential"), description="demo", replace=True)
    >>> "my_seq" in models()
    True
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    keys = [_key(name)] + [_key(a) for a in aliases]
    for k in keys:
        owner = _MODEL_ALIASES.get(k, k if k in _MODELS else None)
        if owner is not None and owner != keys[0] and not replace:
            raise ValueError(f"model name {k!r} is already taken by model {owner!r}")
        if owner == keys[0] and not replace:
            raise ValueError(f"model {k!r} is already registered; pass replace=True")
    _MODELS[keys[0]] = ModelInfo(keys[0], fn, tuple(keys[1:]), description)
    for k in keys[1:]:
        _MODEL_ALIASES[k] = keys[0]


def get_model(name: str | Model) -> Model:
    """The model function registered as ``name`` (or an alias); a callable is returned as is.

    Raises:
        ValueError: unknown name (the message lists the known models).
        TypeError: ``name`` is neither a str nor callable.

    >>> get_model("seq") is get_model("sequential")
    True
    """
    if callable(name) and not isinstance(name, str):
        return name
    if not isinstance(name, str):
        raise TypeError(f"model must be a model name or a callable, got model={name!r}")
    k = _key(name)
    k = _MODEL_ALIASES.get(k, k)
    if k not in _MODELS:
        known = ", ".join(
            f"{m} ({', '.join(i.aliases)})" if i.aliases else m for m, i in _MODELS.items()
        )
        raise ValueError(f"unknown model={name!r}; known models: {known}")
    return _MODELS[k].fn


def models() -> dict[str, str]:
    """Registered model names and their descriptions.

    >>> [m for m in ("sequential", "pairwise", "blocked", "fast") if m in models()]
    ['sequential', 'pairwise', 'blocked', 'fast']
    """
    return {k: i.description for k, i in _MODELS.items()}


def _key(name: str) -> str:
    return name.strip().lower()
