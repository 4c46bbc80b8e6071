"""The report of ``fpemu.validate.compare_keras``: one ``TensorCheck`` per tensor, step by
step and layer by layer, gathered in a ``ModelReport`` (rich table, JSON, markdown).

A check compares the framework's tensor with fpemu's bit for bit: elements compared, how many are
bit-identical, the largest distance in ulps of the tensor's format (steps between the two
values' bit patterns made monotonic), and the first differing element as values and bits.
A tensor that is not bit-identical carries a ``cause`` from ``CAUSES``, found by
recomputing the op locally from the framework's own inputs (``fpemu.validate.twin.checker``).

>>> a = np.array([1.0, 2.0, 3.0], np.float32)
>>> c = compare_arrays(a, a + np.float32([0, 0, 2**-22]), "float32", "float32")
>>> c["identical"], c["max_ulps"], c["first"]["index"]
(2, 1.0, '(2,)')
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fpemu.backend import scratch
from fpemu.training.loop import jsonable

#: Why a tensor is not bit-identical. ``exact``: it is; ``reduction order``: the op's local
#: recomputation from torch's inputs differs only within the bound of summing in a different
#: order (torch's GEMM/reduction order vs fpemu's accumulation model); ``math library``:
#: torch's float32 opmath of a transcendental (Sleef/vectorised erf, tanh, exp) is not correctly
#: rounded and is rounded again to the output format (double rounding), fpemu rounds a float64
#: value once; ``optimizer``: the same update from torch's parameters and gradients rounds
#: differently (torch fuses multiply-adds that fpemu's optimizer rounds twice);
#: ``propagated``: the op itself is bit-exact on torch's inputs; an earlier difference reached
#: it; ``format``: the two sides hold the tensor in different formats (a policy entry differs
#: from torch's autocast); ``unexplained``: none of these (a real difference).
CAUSES: tuple[str, ...] = ("exact", "reduction order", "math library", "optimizer",
                           "propagated", "format", "unexplained")  # fmt: skip
KINDS: tuple[str, ...] = ("activation", "loss", "grad", "scaler", "param")
_BITS = {"float32": (np.uint32, 32), "float64": (np.uint64, 64), "float16": (np.uint16, 16),
         "bfloat16": (np.uint16, 16)}  # fmt: skip


def codes(a: np.ndarray, fmt: str) -> np.ndarray:
    """Bit patterns of ``a`` (values of ``fmt`` held in float32/float64) as unsigned ints.

    >>> codes(np.array([1.0], np.float32), "bfloat16").tolist()
    [16256]
    """
    if fmt not in _BITS:
        raise ValueError(f"fmt={fmt!r}: accepted {', '.join(_BITS)}")
    if fmt == "float64":
        return np.asarray(a, np.float64).view(np.uint64)
    if fmt == "float16":
        return np.asarray(a, np.float32).astype(np.float16).view(np.uint16)
    bits = np.asarray(a, np.float32).view(np.uint32)
    return (bits >> 16).astype(np.uint16) if fmt == "bfloat16" else bits


def _codes_view(a: np.ndarray, fmt: str) -> np.ndarray:
    """``codes(a, fmt)``, as a view where it can be: bfloat16 values held in float32 are the
    high halves of their words (a strided uint16 view on a little-endian machine)."""
    if fmt == "bfloat16" and a.dtype == np.float32 and a.dtype.byteorder in "=<" and \
            sys.byteorder == "little":  # fmt: skip
        if a.ndim and a.strides[-1] == 4:  # view() needs a contiguous last axis
            return a.view(np.uint16)[..., 1::2]
    return codes(a, fmt)


def _ordinal(c: np.ndarray, fmt: str) -> np.ndarray:
    """Bit patterns made monotonic: sign-magnitude to a signed integer (exact in int64)."""
    nbits = _BITS[fmt][1]
    if nbits == 64:
        v = c.view(np.int64)
        return np.where(v < 0, -(v & np.int64(2**63 - 1)), v)
    v = c.astype(np.int64)
    mag = v & ((1 << (nbits - 1)) - 1)
    return np.where(v >> (nbits - 1) != 0, -mag, mag)


def ulps(a: np.ndarray, b: np.ndarray, fmt: str) -> np.ndarray:
    """Distance in ulps of ``fmt`` between values ``a`` and ``b`` (0 between +0 and -0; inf
    where exactly one is NaN, 0 where both are).

    >>> ulps(np.float32([1.0, np.nan]), np.float32([1.0078125, np.nan]), "bfloat16").tolist()
    [1.0, 0.0]
    """
    a, b = np.asarray(a), np.asarray(b)
    return _distance(a, b, codes(a, fmt), codes(b, fmt), fmt)


def _distance(a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray,
              fmt: str) -> np.ndarray:  # fmt: skip
    d = np.abs(_ordinal(ca, fmt) - _ordinal(cb, fmt)).astype(np.float64)
    na, nb = np.isnan(a), np.isnan(b)
    if na.any() or nb.any():
        d = np.where(na & nb, 0.0, np.where(na | nb, np.inf, d))
    return np.asarray(d, np.float64)


def _max_distance16(t: np.ndarray, f: np.ndarray, ct: np.ndarray, cf: np.ndarray,
                    same: np.ndarray) -> float:  # fmt: skip
    """``_distance(...)`` of 16-bit codes maximised over the elements that are not ``same``,
    on whole arrays in reused work buffers (gathering the differing elements, and large
    temporaries, cost more than the arithmetic when many differ). The ordinals come from a
    table, and they and their differences are exact in int32, so the maximum is the same
    value; one NaN against a number is inf."""
    diff = ~same.reshape(-1)
    if np.any(np.isnan(t).reshape(-1) & diff) or np.any(np.isnan(f).reshape(-1) & diff):
        return math.inf  # a NaN against a number (both NaN counts as ``same``)
    n = int(t.size)
    a = scratch(n, np.int32)
    b = scratch(n, np.uint32).view(np.int32)  # a second buffer
    np.take(_ORD16, ct, out=a.reshape(ct.shape))
    np.take(_ORD16, cf, out=b.reshape(cf.shape))
    a -= b
    np.abs(a, out=a)
    return float(np.max(a, where=diff, initial=0))


#: ``_ordinal`` of every 16-bit code: sign-magnitude to a signed integer
_ORD16 = np.where(np.arange(1 << 16) >= 1 << 15, (1 << 15) - np.arange(1 << 16),
                  np.arange(1 << 16)).astype(np.int32)  # fmt: skip


def native(v: Any) -> Any:
    """``v`` as JSON-native data for a report's settings: tuples as lists, a framework dtype
    (torch.bfloat16, a numpy dtype) as its name, None, numbers, strings and bools as they are,
    anything else as its ``str``.

    >>> native(("cpu", np.dtype("float16"))), native({"betas": (0.9, 0.999), "x": None})
    (['cpu', 'float16'], {'betas': [0.9, 0.999], 'x': None})
    """
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): native(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [native(x) for x in v]
    if isinstance(v, np.dtype) or type(v).__name__ == "dtype":  # numpy, torch
        return str(v).removeprefix("torch.")
    return str(v)


def _setting(v: Any) -> str:
    """A setting in markdown: strings as they are, other values as JSON."""
    return v if isinstance(v, str) else json.dumps(v)


def _value(v: Any) -> str:
    return repr(float(v))


def compare_arrays(t: np.ndarray, f: np.ndarray, t_fmt: str, f_fmt: str) -> dict[str, Any]:
    """Counts, largest ulp distance and first difference of torch's ``t`` and fpemu's ``f``."""
    t, f = np.asarray(t), np.asarray(f)
    if t.shape != f.shape:
        raise ValueError(f"shapes differ: torch {t.shape}, fpemu {f.shape}")
    n = int(t.size)
    if t_fmt == f_fmt in _BITS and t.dtype == f.dtype and t.dtype in (np.float32, np.float64):
        # the usual case, a bit-identical tensor, in one pass: codes are a function of the
        # stored bits, so equal storage means equal codes
        u = np.uint32 if t.dtype == np.float32 else np.uint64
        if bool((t.view(u) == f.view(u)).all()):  # (np.array_equal's checks cost more here)
            return {"compared": n, "identical": n, "max_ulps": 0.0, "first": None}
    dist: np.ndarray
    if t_fmt != f_fmt:
        same = np.zeros(t.shape, bool)
        dist = np.full(t.shape, np.inf)
        n_same = 0
    else:
        ct, cf = _codes_view(t, t_fmt), _codes_view(f, f_fmt)
        same = ct == cf
        n_same = int(np.count_nonzero(same))
        if n_same < n:
            same |= np.isnan(t) & np.isnan(f)  # NaN payloads are not compared
            n_same = int(np.count_nonzero(same))
        dist = np.zeros(0)
        if n - n_same > n // 16 and _BITS[t_fmt][1] == 16:  # many differ: whole arrays
            dist = np.array([_max_distance16(t, f, ct, cf, same)])
        elif n_same < n:  # distances of the differing elements only (usually a few)
            k = ~same
            dist = _distance(t[k], f[k], ct[k], cf[k], t_fmt)
    out: dict[str, Any] = {"compared": n, "identical": n_same,
                           "max_ulps": float(dist.max()) if dist.size else 0.0,
                           "first": None}  # fmt: skip
    if n_same < n:
        i = np.unravel_index(int(np.argmin(same.reshape(-1))), t.shape)  # the first False
        hex_t = f"0x{int(codes(t[i], t_fmt)):0{_BITS[t_fmt][1] // 4}x}"
        hex_f = f"0x{int(codes(f[i], f_fmt)):0{_BITS[f_fmt][1] // 4}x}"
        out["first"] = {"index": str(tuple(int(k) for k in i)), "torch": _value(t[i]),
                        "fpemu": _value(f[i]), "torch_bits": hex_t,
                        "fpemu_bits": hex_f}  # fmt: skip
    return out


@dataclass
class TensorCheck:
    """One tensor of one step, torch beside fpemu.

    Attributes:
        step: the training step (0-based).
        kind: one of ``KINDS``.
        name: the node (activation), parameter (grad, param) or scaler field.
        op: the fpemu op that made it (activations), else "".
        torch_format, fpemu_format: the formats the two sides hold it in.
        compared, identical: element counts.
        max_ulps: the largest distance in ulps of ``torch_format`` (inf if formats differ).
        first: the first differing element: index, both values and both bit patterns.
        cause: one of ``CAUSES``.
        local_ulps: the op recomputed by fpemu from torch's inputs, its largest distance from
            torch's result (None: not recomputed).
        bound_ulps: the largest distance the cause allows, in ulps (None: no bound applies).
        explained: the difference is exact, propagated, or within the cause's bound.
        note: one sentence: what was found and why.
    """

    step: int
    kind: str
    name: str
    op: str = ""
    torch_format: str = "float32"
    fpemu_format: str = "float32"
    compared: int = 0
    identical: int = 0
    max_ulps: float = 0.0
    first: dict[str, str] | None = None
    cause: str = "exact"
    local_ulps: float | None = None
    bound_ulps: float | None = None
    explained: bool = True
    note: str = ""

    @property
    def exact(self) -> bool:
        """Every element bit-identical (and the same format)."""
        return self.identical == self.compared and self.torch_format == self.fpemu_format


@dataclass
class ModelReport:
    """Every ``TensorCheck`` of a ``fpemu.validate.compare_keras`` run, plus settings."""

    title: str = "compare_keras"
    settings: dict[str, Any] = field(default_factory=dict)
    checks: list[TensorCheck] = field(default_factory=list)
    audit: list[dict[str, str]] = field(default_factory=list)
    #: per step: both losses, the scale used, whether each side skipped the step
    trace: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Every tensor of every step bit-identical."""
        return all(c.exact for c in self.checks)

    @property
    def ok(self) -> bool:
        """Every difference explained (exact, propagated, or within its cause's bound)."""
        return all(c.explained for c in self.checks)

    def select(self, *, step: int | None = None, kind: str | None = None,
               name: str | None = None) -> list[TensorCheck]:  # fmt: skip
        """The checks matching every given field."""
        return [
            c
            for c in self.checks
            if (step is None or c.step == step)
            and (kind is None or c.kind == kind)
            and (name is None or c.name == name)
        ]

    def first_difference(self) -> TensorCheck | None:
        """The first non-identical tensor in execution order (step, then forward, loss,
        gradients, scaler, parameters), or None."""
        return next((c for c in self.checks if not c.exact), None)

    def first_unexplained(self) -> TensorCheck | None:
        """The first tensor whose difference is not explained, or None."""
        return next((c for c in self.checks if not c.explained), None)

    def summary(self) -> str:
        """One line: tensors checked, bit-identical, and the first difference with its cause."""
        n, same = len(self.checks), sum(c.exact for c in self.checks)
        head = f"{same} of {n} tensors bit-identical"
        first = self.first_difference()
        if first is None:
            return head + " (every step, every layer)"
        bad = sum(not c.explained for c in self.checks)
        return (f"{head}; first difference: step {first.step} {first.kind} {first.name!r} "
                f"({first.cause}); {bad} unexplained")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (non-finite floats as strings)."""
        out: dict[str, Any] = jsonable({
            "title": self.title, "settings": native(self.settings), "exact": self.exact,
            "ok": self.ok,
            "summary": self.summary(), "trace": self.trace,
            "checks": [asdict(c) for c in self.checks], "audit": self.audit})  # fmt: skip
        return out

    def to_json(self) -> str:
        """``to_dict`` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def rows(self, *, only_differences: bool = False) -> list[dict[str, str]]:
        """One row per check, as text cells (what the markdown and rich tables show)."""
        out = []
        for c in self.checks:
            if only_differences and c.exact:
                continue
            fmt = c.torch_format if c.exact else f"{c.torch_format}/{c.fpemu_format}"
            first = "" if c.first is None else (
                f"{c.first['index']}: torch {c.first['torch']} ({c.first['torch_bits']}), "
                f"fpemu {c.first['fpemu']} ({c.first['fpemu_bits']})")  # fmt: skip
            out.append({"step": str(c.step), "kind": c.kind, "tensor": c.name, "format": fmt,
                        "identical": f"{c.identical}/{c.compared}",
                        "max ulps": _num(c.max_ulps), "cause": c.cause, "first difference": first,
                        "note": c.note})  # fmt: skip
        return out

    def to_markdown(self, *, only_differences: bool = False) -> str:
        """A markdown section: settings, summary, one table row per tensor."""
        lines = [f"## {self.title}", ""]
        lines += [f"- {k}: {_setting(v)}" for k, v in self.settings.items()]
        lines += ["", self.summary(), ""]
        rows = self.rows(only_differences=only_differences)
        if rows:
            keys = list(rows[0])
            lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
            lines += ["| " + " | ".join(r[k].replace("|", "\\|") for k in keys) + " |"
                      for r in rows]  # fmt: skip
        if self.audit:
            keys = list(self.audit[0])
            lines += ["", "### autocast audit", "", "| " + " | ".join(keys) + " |",
                      "|" + "---|" * len(keys)]  # fmt: skip
            lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in self.audit]
        return "\n".join(lines)

    def to_html(self) -> str:
        """A self-contained HTML page: loss curves, loss scale, ulp distance per layer and
        step (pictures), then sortable tables (see :mod:`fpemu.validate.frameworks.report_html`)."""
        from fpemu.validate.frameworks.report_html import model_page  # noqa: PLC0415 - page code apart

        return model_page(self)

    def render(self, console: Any = None, *, only_differences: bool = False) -> None:
        """Print the report as a rich table.

        Narrower than 120 columns the format and note columns leave the table: each row with
        a note (or two formats) gets a number, and the notes follow as numbered paragraphs.
        """
        from rich import box  # noqa: PLC0415 - display only
        from rich.console import Console  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415

        from fpemu.validate.frameworks.report import _hanging  # noqa: PLC0415

        con = console if console is not None else Console()
        narrow = con.width < 120
        table = Table(title=self.title, box=box.SIMPLE_HEAD, pad_edge=False)
        cols = (("step", "kind", "tensor", "identical", "ulps", "cause", "note") if narrow else
                ("step", "kind", "tensor", "format", "identical", "max ulps", "cause",
                 "note"))  # fmt: skip
        for col in cols:
            table.add_column(col, no_wrap=col in ("step", "identical", "ulps", "max ulps")
                             or (narrow and col == "note"))  # fmt: skip
        notes: list[str] = []
        for r in self.rows(only_differences=only_differences):
            style = "green" if r["cause"] == "exact" else "yellow"
            cells = {**r, "ulps": r["max ulps"], "cause": f"[{style}]{r['cause']}[/]"}
            if narrow:  # the note by number; rows with the same note share it
                t_fmt, _, f_fmt = r["format"].partition("/")
                both = f"torch {t_fmt}, fpemu {f_fmt}" if f_fmt and f_fmt != t_fmt else ""
                note = "; ".join(x for x in (both, r["note"]) if x)
                if note and note not in notes:
                    notes.append(note)
                cells["note"] = str(notes.index(note) + 1) if note else ""
            table.add_row(*(cells[c] for c in cols))
        if table.row_count:  # nothing to list (only differences, none): the summary says so
            con.print(table)
        for i, note in enumerate(notes, 1):
            con.print(_hanging(f"{i}. {note}", con.width), markup=False, highlight=False)
        con.print(self.summary())


def _num(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:g}"
