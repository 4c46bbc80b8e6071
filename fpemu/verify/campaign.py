"""Campaigns: a domain, a function under test, a reference; one registry and one resolver.

The function under test and the reference take float64 operand arrays (the domain's codes,
decoded by a bit view) and return float64 results, values of the campaign's result format.
Results are compared bit for bit (``view(uint64)``); any NaN equals any NaN (payloads are not
part of the contract). :func:`evaluate_chunk` runs one chunk; it is what a Dask task runs.

Shipped campaigns (:func:`campaigns` lists them): ``OP-FMT-MODE`` for ``add sub mul div`` over
every pair (``FMT`` one of ``fp16 bf16 e4m3fn e5m2``), ``sqrt-FMT-MODE`` over every code,
``cast-fp32-FMT-MODE`` over every float32 bit pattern, ``fma-FMT-MODE`` over every triple
(``e4m3fn e5m2``: 2**24; ``fp16 bf16``: 2**48, for a cluster) and ``fma-FMT-MODE-boundary``;
``MODE`` one of :data:`~fpemu.verify.checker.MODES`. fpemu is checked against the independent
:class:`~fpemu.verify.checker.Checker`. ``torch-OP-FMT`` (``add mul div``, ``fp16 bf16``) checks
PyTorch's CPU operator against fpemu (round-to-nearest-even).

>>> c = get_campaign("mul-e4m3fn-rne")
>>> c.size, evaluate_chunk(c, 3, 16).counts
(65536, {})
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.formats import get_format
from fpemu.verify.checker import MODES, OPS, Checker, FpemuOp
from fpemu.verify.domains import (
    AllCodes,
    AllTuples,
    Boundary,
    Domain,
    Float32Patterns,
    chunk_bounds,
    codes_of,
    values,
)
from fpemu.verify.frameworks import TorchOp
from fpemu.verify.report import CLASSES, EXAMPLES, ChunkResult

F64 = NDArray[np.float64]
#: Short names of the shipped campaigns' formats.
SHORT: dict[str, str] = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "e4m3fn": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}


@dataclass(frozen=True)
class Campaign:
    """What to check: ``under_test(*operands)`` against ``reference(*operands)`` on ``domain``.

    Attributes:
        name: registry key.
        domain: the cases (see :mod:`fpemu.verify.domains`).
        under_test: vectorised callable, float64 operand arrays -> float64 results.
        reference: the same, giving the correct results.
        fmt: format of the results (for examples in bits and the class of a mismatch).
        exact: optional callable giving the exact result as ``(hi, lo)`` float64 arrays
            (``hi + lo`` exact, or ``lo`` with its sign only); it lets mismatches be classed "tie".
        description: one line for reports.
    """

    name: str
    domain: Domain
    under_test: Callable[..., Any]
    reference: Callable[..., Any]
    fmt: str
    exact: Callable[..., tuple[Any, Any]] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            raise TypeError(f"domain={self.domain!r} is not a Domain")
        for arg in ("under_test", "reference"):
            if not callable(getattr(self, arg)):
                raise TypeError(f"{arg} must be callable, got {getattr(self, arg)!r}")
        object.__setattr__(self, "fmt", get_format(self.fmt).name)

    @property
    def size(self) -> int:
        """Number of cases."""
        return self.domain.size


def _same(got: F64, exp: F64) -> NDArray[np.bool_]:
    eq: NDArray[np.bool_] = (got.view(np.uint64) == exp.view(np.uint64)) | (
        np.isnan(got) & np.isnan(exp)
    )
    return eq


def classify(
    got: F64, exp: F64, fmt: str, hi: F64 | None = None, lo: F64 | None = None
) -> NDArray[np.str_]:
    """The class (:data:`~fpemu.verify.report.CLASSES`) of each mismatching pair.

    >>> classify(np.array([0.0, 1.0]), np.array([-0.0, 2.0]), "fp16").tolist()
    ['zero', 'other']
    """
    f = get_format(fmt)
    g, e = np.abs(got), np.abs(exp)
    with np.errstate(invalid="ignore"):
        tie = np.zeros(got.shape, dtype=bool)
        if hi is not None and lo is not None:
            tie = (lo == 0) & (hi == (got + exp) / 2)  # exact midpoint (fits float64 here)
        conds = [
            np.isnan(got) != np.isnan(exp),
            (got == 0) | (exp == 0),
            np.signbit(got) != np.signbit(exp),
            np.isinf(got) | np.isinf(exp) | (g == f.max) | (e == f.max),
            ((g > 0) & (g < f.tiny)) | ((e > 0) & (e < f.tiny)),
            tie,
        ]
    out: NDArray[np.str_] = np.select(conds, list(CLASSES[:-1]), default=CLASSES[-1])
    return out


def _hex(codes: Any, bits: int) -> list[str]:
    return [f"0x{int(c):0{(bits + 3) // 4}x}" for c in codes]


#: Cases evaluated at once inside a chunk: bounds memory (an fma-fp16 block peaks at about
#: 0.4 GB), so a chunk may be large (fewer tasks) without growing the working set.
BLOCK = 1 << 21


def evaluate_chunk(campaign: Campaign, index: int, n: int) -> ChunkResult:
    """Run chunk ``index`` of ``n``: compare, count mismatches by class, keep the first ones.

    The chunk is evaluated in blocks of :data:`BLOCK` cases.
    """
    t0 = time.process_time()
    lo, hi = chunk_bounds(campaign.domain.size, index, n)
    counts: dict[str, int] = {}
    examples: list[dict[str, Any]] = []
    for start in range(lo, hi, BLOCK):
        _evaluate_block(campaign, start, min(start + BLOCK, hi), counts, examples)
    return ChunkResult(index, lo, hi, counts, tuple(examples), time.process_time() - t0)


def _evaluate_block(
    campaign: Campaign, lo: int, hi: int, counts: dict[str, int], examples: list[dict[str, Any]]
) -> None:
    d = campaign.domain
    codes = d.cases(lo, hi)
    xs = [values(c, d.fmt) for c in codes]
    got = np.asarray(campaign.under_test(*xs), dtype=np.float64).reshape(-1)
    exp = np.asarray(campaign.reference(*xs), dtype=np.float64).reshape(-1)
    if got.shape != exp.shape or got.size != hi - lo:
        raise ValueError(
            f"campaign {campaign.name}: results have {got.size} and {exp.size} "
            f"elements for {hi - lo} cases"
        )
    bad = np.flatnonzero(~_same(got, exp))
    if not bad.size:
        return
    sub = [x[bad] for x in xs]
    parts = campaign.exact(*sub) if campaign.exact is not None else (None, None)
    pa = [
        None if p is None else np.broadcast_to(np.asarray(p, np.float64), bad.shape) for p in parts
    ]
    cls = classify(got[bad], exp[bad], campaign.fmt, pa[0], pa[1])
    names, nums = np.unique(cls, return_counts=True)
    for k, v in zip(names, nums, strict=True):
        counts[str(k)] = counts.get(str(k), 0) + int(v)
    first = bad[: max(EXAMPLES - len(examples), 0)]
    ob, rb = get_format(d.fmt).bits, get_format(campaign.fmt).bits
    ops = [_hex(c[first], ob) for c in codes]
    g_hex = _hex(codes_of(got[first], campaign.fmt), rb)
    e_hex = _hex(codes_of(exp[first], campaign.fmt), rb)
    for j, k in enumerate(first):
        examples.append(
            {
                "case": lo + int(k),
                "operands": [o[j] for o in ops],
                "got": g_hex[j],
                "expected": e_hex[j],
                "class": str(cls[j]),
            }
        )


# -- registry --------------------------------------------------------------------------------
_REGISTRY: dict[str, Campaign] = {}


def register_campaign(campaign: Campaign, *, replace: bool = False) -> Campaign:
    """Add a campaign to the registry (ValueError if the name is taken, unless ``replace``)."""
    if not isinstance(campaign, Campaign):
        raise TypeError(f"campaign must be a Campaign, got {campaign!r}")
    if campaign.name in _REGISTRY and not replace:
        raise ValueError(f"campaign name {campaign.name!r} is already registered")
    _REGISTRY[campaign.name] = campaign
    return campaign


def campaigns() -> list[str]:
    """Names of the registered campaigns."""
    return list(_REGISTRY)


def get_campaign(campaign: str | Campaign) -> Campaign:
    """Resolve a campaign name (or pass a :class:`Campaign` through).

    >>> get_campaign("sqrt-bf16-rup").domain.describe()
    'every bfloat16 code (65536 cases)'
    """
    if isinstance(campaign, Campaign):
        return campaign
    if isinstance(campaign, str) and campaign in _REGISTRY:
        return _REGISTRY[campaign]
    hint = "; see fpemu.verify.campaigns() or `fpemu verify --list`"
    raise ValueError(f"unknown campaign={campaign!r}{hint}")


def fpemu_campaign(
    op: str, fmt: str, mode: str, domain: Domain | None = None, name: str | None = None
) -> Campaign:
    """fpemu's ``op`` against the independent checker (default domain: every tuple/code)."""
    if op not in OPS:
        raise ValueError(f"op={op!r}: expected one of {tuple(OPS)}")
    f = get_format(SHORT.get(fmt, fmt)).name
    if domain is None:
        domain = Float32Patterns() if op == "cast" else AllTuples(f, OPS[op])
    chk = Checker(op, f, mode)
    label = name or f"{op}-{fmt}-{mode}"
    return Campaign(
        label,
        domain,
        FpemuOp(op, f, mode),
        chk,
        f,
        chk.parts,
        f"fpemu.{op} to {f}, mode {mode}, vs the independent checker: {domain.describe()}",
    )


def torch_campaign(op: str, fmt: str) -> Campaign:
    """PyTorch CPU ``op`` over every pair of ``fmt`` codes against fpemu (mode rne).

    >>> torch_campaign("div", "bf16").name
    'torch-div-bf16'
    """
    f = get_format(SHORT.get(fmt, fmt)).name
    dom = AllTuples(f, 2)
    return Campaign(
        f"torch-{op}-{fmt}", dom, TorchOp(op, f), FpemuOp(op, f, "rne"), f,
        Checker(op, f, "rne").parts,
        f"torch.{op} on CPU {f} tensors vs fpemu (rne): {dom.describe()}",
    )  # fmt: skip


def _register_shipped() -> None:
    for mode in MODES:
        for short, name in SHORT.items():
            for op in ("add", "sub", "mul", "div"):
                register_campaign(fpemu_campaign(op, short, mode))
            register_campaign(fpemu_campaign("sqrt", short, mode, AllCodes(name)))
            register_campaign(fpemu_campaign("cast", short, mode, name=f"cast-fp32-{short}-{mode}"))
            register_campaign(fpemu_campaign("fma", short, mode))
            register_campaign(
                fpemu_campaign(
                    "fma", short, mode, Boundary(name, 3), name=f"fma-{short}-{mode}-boundary"
                )
            )
    for op in ("add", "mul", "div"):
        for short in ("fp16", "bf16"):
            register_campaign(torch_campaign(op, short))


_register_shipped()
