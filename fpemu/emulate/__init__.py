"""``fpemu.emulate``: run an unmodified torch program under emulated hardware numerics.

Inside ``with fpemu.emulate(policy=..., model=...) as em:`` your own torch code (model, loss,
backward, optimizer, ``torch.amp.GradScaler``) runs unchanged on the CPU, and every ATen op's
result is replaced by fpemu's emulation of that op (:mod:`fpemu.validate.ops`, the table
:func:`fpemu.watch` judges with):

* ``policy``: an AMP preset applied as its framework and device apply it, inside the program's
  own ``torch.autocast`` regions (``autocast=True``: the whole forward). ``torch_cuda_fp16`` /
  ``torch_cuda_bf16`` get CUDA's autocast lists, not torch's CPU ones
  (:mod:`fpemu.emulate.lists`, :mod:`fpemu.emulate.casting`);
* ``model``: the accumulation model of every matmul-class op, forward and backward
  (``mm addmm bmm baddbmm mv dot``): any name of :func:`fpemu.models` (``"h100"``,
  ``"sm90.wgmma.bf16.f32"``, ``"cdna3.mfma.f16.f32"``, ``"sequential"``, ...). ``"fast"`` is
  the exact sum rounded once to float32 here (:func:`fpemu.validate.ops.matmul.exact32`): a
  BLAS order is not reproducible, and emulated values must be the same bits on every CPU and
  thread count. float32 GEMMs (outside autocast) run as CUDA cores run them, one FMA chain per
  output (``"sequential"``), on models that take no float32 inputs (torch's default
  ``allow_tf32=False``);
* ``recipe``: an FP8/MX/NVFP4 recipe for the Linear layers' GEMMs (:mod:`fpemu.emulate.recipes`).

Ops with no emulation run as torch's kernel and are counted, never silently: ``em.summary()``.
Tensors keep torch dtypes, so loops, GradScaler and logging work as on the GPU.

:func:`fpemu.emulate.as_torch.as_torch_cpu` is the same replacement configured to reproduce
torch's own CPU numerics instead (torch's autocast as the program sets it, no accumulation
model, this CPU's capability and thread count): the twin of ``fpemu.validate.compare_torch``.

>>> import torch, fpemu
>>> lin = torch.nn.Linear(4, 3)
>>> with fpemu.emulate(policy="torch_cuda_fp16", model="h100", autocast=True) as em:
...     y = lin(torch.ones(2, 4))
>>> y.dtype, em.counts["emulated"] > 0
(torch.float16, True)
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["Emulation", "emulate"]


class Emulation:
    """What ``with fpemu.emulate(...) as em`` gives: counts, recipe state and a summary."""

    def __init__(self, settings: dict[str, Any], mode: Any, policy_mode: Any, regions: Any,
                 recipe: Any) -> None:  # fmt: skip
        self.settings = settings
        self._mode, self._policy, self._regions, self._recipe = mode, policy_mode, regions, recipe

    @property
    def state(self) -> dict[str, Any]:
        """Recipe scaling state per Linear module (dotted path -> state); empty without recipe."""
        return {} if self._recipe is None else self._recipe.state

    @property
    def emulated(self) -> dict[str, int]:
        """ATen op -> how many times its result was replaced by the emulation."""
        return dict(self._mode.emulated)

    @property
    def not_emulated(self) -> dict[str, int]:
        """ATen op -> how many times it ran as torch's own kernel (no emulation in the table)."""
        return dict(self._mode.not_emulated)

    @property
    def failed(self) -> dict[str, str]:
        """ATen op -> the first reason its emulation failed (torch's value was kept)."""
        return dict(self._mode.failed)

    @property
    def counts(self) -> dict[str, int]:
        """Totals: ``emulated``, ``not_emulated``, ``failed`` ops, ``casts`` by the policy,
        ``regions`` (autocast regions the program entered)."""
        return {
            "emulated": sum(self._mode.emulated.values()),
            "not_emulated": sum(self._mode.not_emulated.values()),
            "failed": sum(self._mode.failed_count.values()),
            "casts": self._policy.casts,
            "regions": self._regions.entered,
        }

    def summary(self) -> str:
        """Plain-text summary: settings, op counts by name, recipe traces."""
        from fpemu.emulate.summary import summary_text  # noqa: PLC0415

        return summary_text(self)


def _check(policy: Any, model: Any, recipe: Any, autocast: Any, strict: Any) -> tuple[Any, str]:
    from fpemu.amp.policy import Policy, get_policy  # noqa: PLC0415
    from fpemu.linalg import models  # noqa: PLC0415

    if not isinstance(policy, (str, Policy)):
        raise TypeError(f"policy must be a preset name or a fpemu.Policy, got {policy!r}")
    p = get_policy(policy)
    if not isinstance(model, str):
        raise TypeError(f"model must be an accumulation model name (str), got {model!r}")
    if model not in models():
        raise ValueError(
            f"model={model!r} is not an accumulation model; accepted: {', '.join(models())}"
        )
    if recipe is not None:
        from fpemu.emulate.recipes import check_recipe  # noqa: PLC0415

        check_recipe(recipe)
    for arg, value in (("autocast", autocast), ("strict", strict)):
        if not isinstance(value, bool):
            raise TypeError(f"{arg} must be True or False, got {value!r}")
    return p, model


@contextlib.contextmanager
def emulate(
    *,
    policy: Any,
    model: str = "fast",
    recipe: str | None = None,
    autocast: bool = False,
    strict: bool = False,
) -> Iterator[Emulation]:
    """Run the torch code inside the block under emulated numerics (see the module docstring).

    Args:
        policy: an AMP preset name (:func:`fpemu.preset_names`) or a :class:`fpemu.Policy`.
        model: accumulation model of the matmul-class ops (:func:`fpemu.models`).
        recipe: None, or an FP8/MX/NVFP4 recipe name (:data:`fpemu.emulate.recipes.RECIPES`).
        autocast: True to treat the whole block (forward) as an autocast region; False (default)
            to apply the policy only inside the program's own ``torch.autocast`` regions.
        strict: raise when an emulation fails instead of counting it and keeping torch's value.

    Raises:
        ValueError: unknown policy, model or recipe (the message lists what is accepted).
        TypeError: an argument of the wrong type.
        ModuleNotFoundError: torch is not installed.
    """
    p, model = _check(policy, model, recipe, autocast, strict)
    import torch  # noqa: PLC0415

    from fpemu.emulate.casting import PolicyMode, Regions  # noqa: PLC0415 - imports torch
    from fpemu.emulate.dispatch import EmulateMode  # noqa: PLC0415
    from fpemu.emulate.lists import lists_for  # noqa: PLC0415
    from fpemu.validate.watch.convert import dtype_name  # noqa: PLC0415

    compute = getattr(torch, p.compute.name) if p.compute.name in ("float16", "bfloat16") else None
    lists = lists_for(p) if compute is not None else {}
    regions = Regions(always=autocast)
    pmode = PolicyMode(lists, compute, regions)
    dmode = EmulateMode(model=model, options={"policy": p.name}, strict=strict)
    rec = None
    if recipe is not None:
        from fpemu.emulate.recipes import RecipeHooks  # noqa: PLC0415

        rec = RecipeHooks(recipe, compute=compute)
        pmode.recipe = rec
    settings = {
        "policy": p.name,
        "compute": dtype_name(compute) if compute is not None else "float32",
        "model": model,
        "recipe": recipe,
        "autocast": autocast,
    }
    em = Emulation(settings, dmode, pmode, regions, rec)
    with contextlib.ExitStack() as stack:
        stack.enter_context(regions.patched(pmode.clear))
        if rec is not None:
            stack.enter_context(rec.installed(dmode))
        stack.enter_context(pmode)
        stack.enter_context(dmode)
        yield em


class _CallableModule(types.ModuleType):
    """``fpemu.emulate`` is this package and, called, the :func:`emulate` context manager."""

    def __call__(self, **kwargs: Any) -> Any:
        return emulate(**kwargs)


sys.modules[__name__].__class__ = _CallableModule
