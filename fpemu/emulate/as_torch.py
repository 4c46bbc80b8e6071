"""``as_torch_cpu()``: run torch code with every ATen op's value taken from fpemu's op table,
configured to reproduce torch's own CPU numerics (the twin run of ``compare_torch``).

:func:`fpemu.emulate` emulates *other* hardware: it applies a policy's autocast lists itself,
runs matmul-class ops under an accumulation model and asks every emulation for a fixed CPU
capability, so its values do not depend on this machine. Here the aim is the opposite, torch
on this CPU as it runs:

* no policy of fpemu's: the program's own ``torch.autocast`` regions run as torch runs them
  (torch's CPU autocast casts below the mode, the casts are ATen ops like any other);
* no accumulation model (``Call.model`` is None): the matmul family gets the value ``watch``
  judges torch's GEMMs against (a float32 GEMM of the same operands, rounded once);
* this machine's ``ATEN_CPU_CAPABILITY`` and torch's thread count, which some exact
  emulations need (fused multiply-adds of the SIMD builds; per-thread partial sums).

So an op the table claims exact yields torch's own bits, and a bounded op (a GEMM, a
vectorised ``sqrt``) yields the table's value, which may differ from torch's kernel within
the op's bound. Ops with no emulation run as torch's kernel and are counted
(``not_emulated``); an emulation that fails keeps torch's value and is counted (``failed``).

>>> import torch
>>> with as_torch_cpu() as em:
...     y = torch.ones(2, 3) @ torch.ones(3, 2)
>>> y.tolist(), em.emulated["aten.mm.default"]
([[3.0, 3.0], [3.0, 3.0]], 1)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing this module must not import torch
    from fpemu.emulate.dispatch import EmulateMode

__all__ = ["as_torch_cpu"]


@contextlib.contextmanager
def as_torch_cpu(*, strict: bool = False) -> Iterator[EmulateMode]:
    """Emulate every ATen op inside the block as torch's CPU kernels compute it (see the
    module docstring); yields the dispatch mode, whose ``emulated``, ``not_emulated`` and
    ``failed`` count the ops.

    Args:
        strict: raise when an emulation fails instead of keeping torch's value.

    Raises:
        TypeError: ``strict`` is not a bool.
        ModuleNotFoundError: torch is not installed.
    """
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be True or False, got {strict!r}")
    import torch  # noqa: PLC0415

    from fpemu.emulate.dispatch import EmulateMode  # noqa: PLC0415 - imports torch

    capability = str(torch.backends.cpu.get_cpu_capability()).lower()
    mode = EmulateMode(
        model=None,
        options={"num_threads": torch.get_num_threads()},
        strict=strict,
        capability=capability,
    )
    with mode:
        yield mode
