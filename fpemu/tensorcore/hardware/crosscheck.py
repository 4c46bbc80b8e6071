"""Compare a device's MMA results with fpemu's tensor-core model, bit for bit.

The device is any function ``device(instr, a_words, b_words, c_words) -> d_words``:
:func:`fpemu.tensorcore.hardware.mma.run_mma` on a GPU, or (in tests, on the CPU) another model.
Cases come from :mod:`fpemu.tensorcore.hardware.generators`; inputs are exact in their formats, so
the model sees exactly what the hardware sees. Results compare as raw words, NaN equal to any NaN
(payloads differ between models and are not part of the claim).

>>> import numpy as np
>>> from fpemu.tensorcore.hardware.mma import INSTRUCTIONS
>>> fp16 = INSTRUCTIONS["fp16"]
>>> def device(instr, a, b, c):  # a pretend GPU that behaves like an A100
...     return emulate_words(instr, "a100", a, b, c)
>>> r = crosscheck(fp16, "h100", "uniform", cases=1024, device=device,
...                rng=np.random.default_rng(0))
>>> r.cases, r.mismatches > 0  # A100 and H100 differ on ordinary inputs
(1024, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.tensorcore import tensor_core_matmul
from fpemu.tensorcore.hardware.generators import M, N, generate
from fpemu.tensorcore.hardware.mma import Instruction
from fpemu.tensorcore.hardware.words import from_words, same_words, to_words

Words = NDArray[Any]
Device = Callable[[Instruction, Words, Words, Words], Words]

#: Problems per device launch and model call: bounds memory (about 10 MB per chunk at K = 16).
CHUNK = 4096


@dataclass
class Result:
    """Outcome of one (instruction, generator) run.

    Attributes:
        instruction: instruction short name.
        generator: generator name.
        model: fpemu model name compared against.
        cases: output elements compared (one dot product of length K plus C each).
        mismatches: elements whose words differ (NaN = NaN).
        saved: mismatching elements kept for study, as arrays of words: ``a`` (n, K) the row
            of A, ``b`` (n, K) the column of B, ``c``, ``device``, ``model`` (n,).
    """

    instruction: str
    generator: str
    model: str
    cases: int = 0
    mismatches: int = 0
    saved: dict[str, list[Words]] = field(default_factory=dict)

    def saved_arrays(self) -> dict[str, Words]:
        """The saved mismatches as concatenated arrays (empty arrays when none)."""
        return {k: np.concatenate(v) for k, v in self.saved.items() if v}


def emulate_words(
    instr: Instruction, model: str, a: Words, b: Words, c: Words, **options: Any
) -> Words:
    """What fpemu's ``model`` says ``instr`` returns for raw operand words (raw result words).

    The model runs once per instruction (``instr.k`` values of k at a time, each result the
    next one's C), as the kernel issues them: a model whose block is longer than the
    instruction's K (H100's 16-product block against the 8-wide ``fp16_k8``) must not fuse
    products of two instructions.

    Args:
        instr: the instruction (its formats).
        model: tensor-core model name (``"a100"``, ``"h100"``, ...).
        a, b, c: raw words shaped as for :func:`fpemu.tensorcore.hardware.mma.run_mma`.
        **options: model options (``zeros``, ``tiny_sign``), see
            :func:`fpemu.tensorcore.tensor_core_matmul`.
    """
    av, bv = from_words(a, instr.fmt), from_words(b, instr.fmt)
    d = from_words(c, instr.acc)
    for k0 in range(0, av.shape[-1], instr.k):
        ks = slice(k0, k0 + instr.k)
        d = tensor_core_matmul(av[..., ks], bv[..., ks, :], d, arch=model, fmt=instr.fmt,
                               acc=instr.acc, **options)  # fmt: skip
    return to_words(np.asarray(d, dtype=np.float64), instr.acc)


def crosscheck(
    instr: Instruction,
    model: str,
    generator: str,
    *,
    cases: int,
    device: Device,
    rng: np.random.Generator,
    ksteps: int = 1,
    max_saved: int = 10_000,
    options: Mapping[str, Any] | None = None,
) -> Result:
    """Run ``cases`` output elements of ``generator`` through ``device`` and ``model``.

    Args:
        instr: the instruction to issue.
        model: the fpemu tensor-core model to compare with.
        generator: a name from :data:`fpemu.tensorcore.hardware.generators.GENERATORS`.
        cases: number of output elements (rounded up to whole 16 x 8 problems).
        device: the function producing the device's words.
        rng: random source of the generator.
        ksteps: instructions chained per problem (K = ksteps * instr.k).
        max_saved: most mismatching elements kept in the result.
        options: model options passed to :func:`emulate_words`.

    Raises:
        ValueError: ``cases`` or ``ksteps`` not a positive int.
    """
    for arg, v in (("cases", cases), ("ksteps", ksteps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be a positive int, got {v!r}")
    opts = dict(options or {})
    res = Result(instr.name, generator, model)
    problems = -(-cases // (M * N))
    k = instr.k * ksteps
    for p0 in range(0, problems, CHUNK):
        p = min(CHUNK, problems - p0)
        cs = generate(generator, problems=p, fmt=instr.fmt, acc=instr.acc, k=k, rng=rng)
        a, b = to_words(cs.a, instr.fmt), to_words(cs.b, instr.fmt)
        c = to_words(cs.c, instr.acc)
        got = np.asarray(device(instr, a, b, c))
        want = emulate_words(instr, model, a, b, c, **opts)
        bad = ~same_words(got, want, instr.acc)
        res.cases += p * M * N
        res.mismatches += int(bad.sum())
        room = max_saved - sum(len(x) for x in res.saved.get("c", []))
        if room > 0 and bad.any():
            _save(res, bad, a, b, c, got, want, room)
    return res


def _save(
    res: Result, bad: NDArray[np.bool_], a: Words, b: Words, c: Words, got: Words, want: Words,
    room: int,
) -> None:  # fmt: skip
    pi, mi, ni = (ix[:room] for ix in np.nonzero(bad))
    for key, arr in (("a", a[pi, mi, :]), ("b", b[pi, :, ni]), ("c", c[pi, mi, ni]),
                     ("device", got[pi, mi, ni]), ("model", want[pi, mi, ni])):  # fmt: skip
        res.saved.setdefault(key, []).append(arr)


def save_mismatches(results: Iterable[Result], path: str | Path) -> int:
    """Write every result's saved mismatches to one ``.npz``; returns the number written.

    Keys are ``"{instruction}__{generator}__{field}"`` with fields ``a`` (n, K), ``b`` (n, K),
    ``c``, ``device``, ``model`` (raw words) and ``meta`` (model name, total mismatches).
    """
    arrays: dict[str, Any] = {}
    n = 0
    for r in results:
        saved = r.saved_arrays()
        if not saved:
            continue
        pre = f"{r.instruction}__{r.generator}__"
        arrays.update({pre + k: v for k, v in saved.items()})
        arrays[pre + "meta"] = np.array([r.model, str(r.mismatches), str(r.cases)])
        n += len(saved["c"])
    if arrays:
        np.savez_compressed(Path(path), **arrays)
    return n
