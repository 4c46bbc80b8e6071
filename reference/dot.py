"""Dot products with a precisely defined order and rounding of every accumulation step.

Inputs are sequences ``a``, ``b`` of Python floats of equal length ``K`` (already exact in the
input format: they are NOT rounded again) and an addend ``c`` (a float; ``None`` means +0.0),
taken as is: it is not rounded to ``acc`` first. ``round_acc`` is one
:func:`~reference.rounding.round_value` into ``acc`` with ``mode`` and the format's default
overflow/subnormal handling; ``round_out`` likewise into ``out``. Every sum and product below is
exact before its rounding (IEEE zero signs: an exact zero sum of opposite signs is +0, -0 under
``"rdown"``). ``mode="stochastic"`` is not offered (it would need one ``u`` per rounding).

- :func:`sequential_dot`: ``s = c``; for ``k = 0..K-1``: ``s = round_acc(s + a[k]*b[k])``
  (an FMA into the accumulator); result ``round_out(s)``.
- :func:`pairwise_dot`: ``t[k] = round_acc(a[k]*b[k])``; ``total = tree(t)`` where
  ``tree([x]) = x`` and, for ``n >= 2`` terms, with ``h = n // 2``:
  ``tree(t) = round_acc(tree(t[:h]) + tree(t[h:]))``; then ``s = round_acc(c + total)``;
  result ``round_out(s)``. (:func:`pairwise_sum` is ``tree`` of ``round_acc(x[k])``.)
- :func:`blocked_dot`: for each chunk ``j`` of ``block`` consecutive indices
  ``k = j*block .. min((j+1)*block, K) - 1``: ``p = +0``; ``p = round_acc(p + a[k]*b[k])`` over
  the chunk; then the chunk sums are added in order: ``s = c``, ``s = round_acc(s + p_j)``;
  result ``round_out(s)``.
- ``K == 0``: every model returns ``round_out(c)``.

>>> from reference.spec import FLOAT16, FLOAT32
>>> a, b = [1.0, 2.0**-11, 2.0**-11], [1.0, 1.0, 1.0]
>>> sequential_dot(a, b, 0.0, FLOAT16, FLOAT32)  # 1 + 2**-11 ties to 1, twice
1.0
>>> pairwise_dot(a, b, 0.0, FLOAT16, FLOAT32)  # 1 + (2**-11 + 2**-11)
1.0009765625
>>> float(exact_dot(a, b))
1.0009765625
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from reference.arith import exact_add, exact_fma, exact_mul
from reference.rounding import Options, resolve_options, round_with
from reference.spec import Spec
from reference.value import Value, from_float, to_float, to_fraction


def _check(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise ValueError(f"a and b must have the same length, got len(a)={len(a)}, len(b)={len(b)}")


def _options(spec: Spec, mode: str) -> Options:
    if mode == "stochastic":
        raise ValueError("mode='stochastic' is not supported by the reference dot products")
    return resolve_options(spec, mode)


def _addend(c: float | None) -> Value:
    return Fraction(0) if c is None else from_float(c)


def exact_dot(a: Sequence[float], b: Sequence[float], c: float | None = 0.0) -> Fraction:
    """Exact ``sum(a[k] * b[k]) + c`` as a Fraction (finite inputs only).

    Raises:
        ValueError: lengths differ or an input is inf/NaN.

    >>> exact_dot([0.1, 3.0], [10.0, 1.0], 1.0) == Fraction(0.1) * 10 + 4
    True
    """
    _check(a, b)
    total = to_fraction(_addend(c))
    for x, y in zip(a, b, strict=True):
        total += to_fraction(from_float(x)) * to_fraction(from_float(y))
    return total


def _chain(a: Sequence[float], b: Sequence[float], start: Value, acc: Spec, opts: Options) -> Value:
    """``s = start``; ``s = round_acc(s + a[k]*b[k])`` for each k (one rounding per step)."""
    s = start
    for x, y in zip(a, b, strict=True):
        s = round_with(exact_fma(from_float(x), from_float(y), s, opts.mode), acc, opts)
    return s


def sequential_dot(
    a: Sequence[float],
    b: Sequence[float],
    c: float | None,
    acc_spec: Spec,
    out_spec: Spec,
    mode: str = "rne",
) -> float:
    """Sequential FMA chain into ``acc_spec``, then one rounding to ``out_spec`` (module doc).

    >>> from reference.spec import BFLOAT16, FLOAT32
    >>> sequential_dot([1.0] * 3, [2.0**-9] * 3, 1.0, BFLOAT16, FLOAT32)  # each step back to 1
    1.0
    """
    _check(a, b)
    acc_opts, out_opts = _options(acc_spec, mode), _options(out_spec, mode)
    s = _chain(a, b, _addend(c), acc_spec, acc_opts)
    return to_float(round_with(s, out_spec, out_opts))


def _tree(terms: Sequence[Value], acc: Spec, opts: Options) -> Value:
    if len(terms) == 1:
        return terms[0]
    h = len(terms) // 2
    left, right = _tree(terms[:h], acc, opts), _tree(terms[h:], acc, opts)
    return round_with(exact_add(left, right, opts.mode), acc, opts)


def pairwise_sum(x: Sequence[float], acc_spec: Spec, mode: str = "rne") -> float:
    """Pairwise (recursive halving) sum: each ``x[k]`` rounded to ``acc_spec``, then ``tree``.

    ``tree([t]) = t``; otherwise with ``h = n // 2``:
    ``tree(t) = round(tree(t[:h]) + tree(t[h:]))``. An empty ``x`` sums to +0.0.

    >>> from reference.spec import FLOAT16
    >>> pairwise_sum([1.0, 2.0**-11, 2.0**-11, 2.0**-11], FLOAT16)  # (1 + 2**-11 -> 1) + 2**-10
    1.0009765625
    """
    opts = _options(acc_spec, mode)
    if not x:
        return 0.0
    return to_float(_tree([round_with(from_float(v), acc_spec, opts) for v in x], acc_spec, opts))


def pairwise_dot(
    a: Sequence[float],
    b: Sequence[float],
    c: float | None,
    acc_spec: Spec,
    out_spec: Spec,
    mode: str = "rne",
) -> float:
    """Products rounded to ``acc_spec``, summed pairwise, then ``c`` added (module doc).

    >>> from reference.spec import FLOAT16
    >>> pairwise_dot([3.0, 5.0], [2.0**-12, 2.0**-12], 1.0, FLOAT16, FLOAT16)
    1.001953125
    """
    _check(a, b)
    acc_opts, out_opts = _options(acc_spec, mode), _options(out_spec, mode)
    s = _addend(c)
    if a:
        products = [exact_mul(from_float(x), from_float(y)) for x, y in zip(a, b, strict=True)]
        terms = [round_with(p, acc_spec, acc_opts) for p in products]
        total = _tree(terms, acc_spec, acc_opts)
        s = round_with(exact_add(s, total, acc_opts.mode), acc_spec, acc_opts)
    return to_float(round_with(s, out_spec, out_opts))


def blocked_dot(
    a: Sequence[float],
    b: Sequence[float],
    c: float | None,
    block: int,
    acc_spec: Spec,
    out_spec: Spec,
    mode: str = "rne",
) -> float:
    """Per-chunk FMA chains from +0, chunk sums added in order into ``c`` (module doc).

    Raises:
        ValueError: ``block < 1`` or lengths differ.
        TypeError: ``block`` is not an int.

    >>> from reference.spec import FLOAT16, FLOAT32
    >>> a, b = [1.0, 1.0, 2.0**-10, 2.0**-10], [1.0] * 4
    >>> blocked_dot(a, b, 0.0, 2, FLOAT16, FLOAT32), sequential_dot(a, b, 0.0, FLOAT16, FLOAT32)
    (2.001953125, 2.0)
    """
    _check(a, b)
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"block must be an int, got {block!r}")
    if block < 1:
        raise ValueError(f"block={block} must be >= 1")
    acc_opts, out_opts = _options(acc_spec, mode), _options(out_spec, mode)
    s = _addend(c)
    for j in range(0, len(a), block):
        p = _chain(a[j : j + block], b[j : j + block], Fraction(0), acc_spec, acc_opts)
        s = round_with(exact_add(s, p, acc_opts.mode), acc_spec, acc_opts)
    return to_float(round_with(s, out_spec, out_opts))
