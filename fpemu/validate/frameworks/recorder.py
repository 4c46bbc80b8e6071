"""Record your own loss scaler's trace and check it against a framework's reference rules.

Record, once per iteration, the scale your loss was multiplied by and whether that
iteration's gradients held an inf or NaN (optionally whether the step was skipped). Then
:func:`check_trace` replays the same found-inf sequence through fpemu's scaler for the named
rules (``"torch"``, ``"keras"``, ``"tf_keras"``, ``"apex"``, ..., or any
:class:`~fpemu.amp.scaling.LossScaler`) and points at the first step where the recorded scale (or
skip) breaks them.

>>> rec = ScalerRecorder()
>>> for scale, bad in [(8.0, False), (16.0, False), (32.0, True), (16.0, False)]:
...     rec.record(scale, bad)
>>> r = check_trace(rec, rules="torch", growth_interval=1)
>>> r.status, r.data["first_bad_step"]
('agree', None)
>>> r = check_trace(rec, rules="torch", growth_interval=2)
>>> r.status, r.witness["step"], r.witness["recorded scale"], r.witness["expected scale"]
('differ', '1', '16.0', '8.0')

With torch, :meth:`ScalerRecorder.attach` wraps a ``torch.amp.GradScaler``'s ``update`` so
every iteration is recorded automatically (see docs/validating-a-framework.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.amp.scaling import LossScaler, get_scaler
from fpemu.validate.frameworks.report import CheckResult


@dataclass(frozen=True)
class TraceEntry:
    """One iteration: the scale the loss was multiplied by, found-inf, and (optionally) whether
    the optimizer step was skipped."""

    scale: float
    found_inf: bool
    skipped: bool | None = None


class ScalerRecorder:
    """A list of :class:`TraceEntry`, filled by :meth:`record` or by an attached GradScaler.

    >>> rec = ScalerRecorder()
    >>> rec.record(65536.0, found_inf=True, skipped=True)
    >>> len(rec), rec[0].skipped
    (1, True)
    """

    def __init__(self, entries: Iterable[TraceEntry] = ()) -> None:
        self.entries: list[TraceEntry] = list(entries)

    def record(self, scale: float, found_inf: bool, *, skipped: bool | None = None) -> None:
        """Append one iteration.

        Args:
            scale: the scale this iteration's loss was multiplied by (before ``update()``).
            found_inf: whether this iteration's (scaled) gradients held inf or NaN.
            skipped: whether the optimizer step was skipped, if known.

        Raises:
            TypeError: ``scale`` is not a real number, or a flag is not a bool.
        """
        if isinstance(scale, bool) or not isinstance(scale, int | float | np.integer | np.floating):
            raise TypeError(f"scale must be a real number, got {scale!r}")
        if not isinstance(found_inf, bool | np.bool_):
            raise TypeError(f"found_inf must be a bool, got {found_inf!r}")
        if skipped is not None and not isinstance(skipped, bool | np.bool_):
            raise TypeError(f"skipped must be a bool or None, got {skipped!r}")
        self.entries.append(TraceEntry(float(scale), bool(found_inf),
                                       None if skipped is None else bool(skipped)))  # fmt: skip

    def attach(self, grad_scaler: Any) -> Any:
        """Record every ``update()`` of a ``torch.amp.GradScaler`` (wraps its ``update``).

        Each record holds the scale before the update and whether any optimizer's unscale
        found an inf/NaN (read from the scaler's per-optimizer state, a private torch
        attribute: this needs torch 2.x). Returns the scaler.

        Raises:
            TypeError: ``grad_scaler`` has no ``update``/``get_scale``.
        """
        if not callable(getattr(grad_scaler, "update", None)) or not callable(
            getattr(grad_scaler, "get_scale", None)
        ):
            raise TypeError(
                f"grad_scaler must be a torch.amp.GradScaler, got {type(grad_scaler).__name__}"
            )
        inner = grad_scaler.update

        def update(new_scale: Any = None) -> Any:
            scale = float(grad_scaler.get_scale())
            found = False
            for state in getattr(grad_scaler, "_per_optimizer_states", {}).values():
                for v in state.get("found_inf_per_device", {}).values():
                    found = found or bool(float(v.item()) != 0.0)
            out = inner(new_scale)
            if new_scale is None:
                self.record(scale, found, skipped=found)
            return out

        grad_scaler.update = update
        return grad_scaler

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i: int) -> TraceEntry:
        return self.entries[i]

    def __iter__(self) -> Iterator[TraceEntry]:
        return iter(self.entries)


def _entries(trace: Any) -> list[TraceEntry]:
    out = []
    for i, e in enumerate(trace):
        if isinstance(e, TraceEntry):
            out.append(e)
        elif isinstance(e, dict):
            out.append(TraceEntry(float(e["scale"]), bool(e["found_inf"]), e.get("skipped")))
        elif isinstance(e, tuple | list) and len(e) in (2, 3):
            out.append(TraceEntry(float(e[0]), bool(e[1]), None if len(e) == 2 else e[2]))
        else:
            raise TypeError(
                f"trace[{i}] must be a TraceEntry, a (scale, found_inf[, skipped]) pair or a "
                f"dict with 'scale' and 'found_inf', got {e!r}"
            )
    return out


_INIT_KEYWORD = {"torch": "init_scale", "hysteresis": "init_scale", "keras": "initial_scale",
                 "tf_keras": "initial_scale", "apex": "init_scale", "static": "scale"}  # fmt: skip


def reference_scaler(rules: str | LossScaler, init_scale: float, **options: Any) -> LossScaler:
    """The fpemu scaler for ``rules`` started at ``init_scale`` (or ``rules`` itself).

    Raises:
        ValueError: unknown rules name.
    """
    if isinstance(rules, LossScaler):
        return rules
    if not isinstance(rules, str):
        raise TypeError(f"rules must be a scaler name or a LossScaler, got {rules!r}")
    probe = get_scaler(rules)  # resolves aliases, raises ValueError for unknown names
    key = _INIT_KEYWORD.get(probe.name)
    kw = dict(options)
    if key is not None:
        kw.setdefault(key, init_scale)
    return get_scaler(rules, **kw)


def check_trace(trace: Any, rules: str | LossScaler = "torch", **options: Any) -> CheckResult:
    """Check a recorded scale trace against a framework's scaling rules.

    Args:
        trace: a :class:`ScalerRecorder`, or a sequence of :class:`TraceEntry`,
            ``(scale, found_inf[, skipped])`` tuples or dicts.
        rules: a scaler name for :func:`fpemu.amp.scaling.get_scaler` (``"torch"``, ``"keras"``,
            ``"tf_keras"``, ``"apex"``, ``"hysteresis"``...), or a LossScaler (used as is).
        **options: the scaler's constructor keywords (e.g. ``growth_interval=2000``); the
            initial scale defaults to the first recorded scale.

    Returns:
        A :class:`CheckResult` (group ``"trace"``): ``agree``, or ``differ`` with the first
        step whose recorded scale (or skip) the rules contradict; ``data["first_bad_step"]``.

    Raises:
        TypeError: a malformed trace entry.
        ValueError: an empty trace or unknown rules.
    """
    entries = _entries(trace)
    if not entries:
        raise ValueError("trace is empty: record at least one iteration")
    ref = reference_scaler(rules, entries[0].scale, **options)
    res = CheckResult("trace", f"recorded trace vs {ref.name} rules", "agree",
                      compared=len(entries), data={"first_bad_step": None})  # fmt: skip
    for i, e in enumerate(entries):
        ref.scale(np.float32(1.0))  # torch-style scalers create their state lazily here
        expected = float(ref.get_scale())
        if np.float32(expected) != np.float32(e.scale):
            return _fail(res, i, e, "scale", expected)
        opt = _Probe(np.array([np.inf if e.found_inf else 1.0], dtype=np.float32))
        with np.errstate(over="ignore", invalid="ignore"):
            ref.step(opt)
            record = ref.update()
        if e.skipped is not None and record is not None and record.skipped != e.skipped:
            return _fail(res, i, e, "skipped", record.skipped)
    return res


class _Probe:
    """A one-parameter optimizer (``OptimizerLike``) carrying the recorded found-inf."""

    def __init__(self, grad: np.ndarray) -> None:
        self.params = [self]
        self.grad: np.ndarray | None = grad

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to update: only the scaler's decision matters."""


def _fail(res: CheckResult, i: int, e: TraceEntry, field: str, expected: Any) -> CheckResult:
    res.status = "differ"
    res.data["first_bad_step"] = i
    got = e.scale if field == "scale" else e.skipped
    res.witness = {"step": str(i), f"recorded {field}": repr(got),
                   f"expected {field}": repr(expected)}  # fmt: skip
    res.notes.append(f"steps 0..{i - 1} follow the rules" if i else "the first step breaks them")
    return res
