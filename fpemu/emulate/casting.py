"""The policy, above autograd: a ``TorchFunctionMode`` casting the floating inputs of listed
torch functions with differentiable ``.to()``, inside the program's autocast regions only.

Regions. The program's own ``torch.autocast("cpu" | "cuda", ...)`` blocks say where autocast is
on; ``emulate`` patches ``torch.autocast``'s ``__init__``, ``__enter__`` and ``__exit__`` for its
block, so a region is recorded (enabled or not, nested) and torch's own CPU autocast is never
switched on (it would apply CPU's lists, not the policy's). The region's ``dtype`` is not used:
the policy's compute dtype is (the program runs as on the policy's device). With
``autocast=True`` the whole block is a region, except autograd's backward (autocast affects
the forward only) and explicit ``enabled=False`` regions.

Casts. As torch's autocast does (amp.md 2.1): only out-of-place calls (no trailing ``_``, no
``out=``); only eligible tensors (floating, not float64); ``set_opt`` functions keep a
``dtype=`` the caller gave; an fp32 leaf tensor that requires grad (a weight) is cast once and
the cast reused while its version is unchanged (the autocast cache: a weight used twice gets
its two gradient contributions summed in the low dtype, research note E3), cleared when the
outermost region exits.

Limitation: a Python-level composite that calls other torch functions (e.g.
``F.multi_head_attention_forward``) is seen as one call; the functions inside it are not cast
(a mode is off while its own handler runs).

>>> import torch
>>> regions = Regions(always=False)
>>> with regions.patched(lambda: None), PolicyMode({"mm": "lower"}, torch.bfloat16, regions):
...     outside = torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype
...     with torch.autocast("cuda"):
...         inside = torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype
>>> outside, inside, regions.entered
(torch.float32, torch.bfloat16, 1)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Iterator
from typing import Any

from torch.overrides import TorchFunctionMode

__all__ = ["PolicyMode", "Regions"]


class Regions:
    """Autocast regions as the program opens them (a stack of enabled flags)."""

    def __init__(self, *, always: bool) -> None:
        self.always = always
        self.stack: list[bool] = []
        self.entered = 0  # regions entered, for the summary

    def on(self) -> bool:
        """Whether autocast is on now (the innermost region's flag; ``always`` outside any)."""
        if self.stack:
            return self.stack[-1]
        return self.always

    @contextlib.contextmanager
    def patched(self, on_exit: Any) -> Iterator[None]:
        """Replace torch.autocast's methods for the block (restored afterwards)."""
        from torch.amp.autocast_mode import autocast  # noqa: PLC0415

        orig = {k: autocast.__dict__[k] for k in ("__init__", "__enter__", "__exit__")}
        sig = inspect.signature(orig["__init__"])
        regions = self

        @functools.wraps(orig["__init__"])
        def init(ac: Any, *args: Any, **kwargs: Any) -> None:
            bound = sig.bind(ac, *args, **kwargs)
            bound.apply_defaults()
            ac._fpemu_enabled = bool(bound.arguments.get("enabled", True))
            with warnings.catch_warnings():  # "CUDA is not available": the region is still on
                warnings.simplefilter("ignore")
                orig["__init__"](ac, *args, **kwargs)

        def enter(ac: Any) -> Any:
            regions.stack.append(bool(getattr(ac, "_fpemu_enabled", True)))
            regions.entered += 1
            return ac

        def exit_(ac: Any, *exc: Any) -> bool:
            if regions.stack:
                regions.stack.pop()
            if not regions.stack:
                on_exit()
            return False

        autocast.__init__ = init  # type: ignore[method-assign,assignment]
        autocast.__enter__ = enter  # type: ignore[method-assign]
        autocast.__exit__ = exit_  # type: ignore[method-assign]
        try:
            yield
        finally:
            for k, v in orig.items():
                setattr(autocast, k, v)


class PolicyMode(TorchFunctionMode):  # type: ignore[misc,no-untyped-call]
    """Casts the inputs of the policy's listed functions inside autocast regions."""

    def __init__(self, lists: dict[str, str], compute: Any, regions: Regions) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.lists = lists
        self.compute = compute
        self.regions = regions
        self.cache: dict[int, tuple[Any, int, Any, Any]] = {}
        self.casts = 0
        self.recipe: Any = None  # fpemu.emulate.recipes.RecipeHooks when a recipe is given

    def clear(self) -> None:
        """Drop the weight-cast cache (the outermost region ended)."""
        self.cache.clear()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from fpemu.emulate.lists import function_name  # noqa: PLC0415

        kwargs = dict(kwargs or {})
        name = function_name(func)
        on = self.regions.on()
        if self.recipe is not None and name == "linear" and self._forward():
            mod = self.recipe.wants(tuple(args))
            if mod is not None:  # a Linear module's own GEMM: the recipe's FP8/FP4 path
                return self.recipe.linear(mod, tuple(args), kwargs, on)
        if on and self._forward():
            cat = self.lists.get(name)
            if cat is not None and "out" not in kwargs:
                return self._apply(cat, func, tuple(args), kwargs)
        return func(*args, **kwargs)

    @staticmethod
    def _forward() -> bool:
        import torch  # noqa: PLC0415

        return torch._C._current_autograd_node() is None

    def _apply(self, cat: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        import torch  # noqa: PLC0415

        eligible = [t for t in _tensors((args, kwargs)) if _eligible(t)]
        if not eligible:
            return func(*args, **kwargs)
        if cat == "banned":
            raise RuntimeError(
                f"{getattr(func, '__name__', func)} is unsafe to autocast (torch's CUDA autocast "
                "refuses it); use binary_cross_entropy_with_logits, or compute it in float32 "
                "outside the autocast region"
            )
        if cat == "set_opt":
            if kwargs.get("dtype") is not None or not _eligible(_first(args, kwargs)):
                return func(*args, **kwargs)
            target = torch.float32
        elif cat == "lower":
            target = self.compute
        elif cat == "promote":
            target = _widest([t.dtype for t in eligible])
        else:  # fp32, fp32_out_lower
            target = torch.float32
        args, kwargs = _map((args, kwargs), lambda t: self._cast(t, target))
        out = func(*args, **kwargs)
        if cat == "fp32_out_lower":
            out = _map(out, lambda t: self._cast(t, self.compute))
        return out

    def _cast(self, t: Any, dt: Any) -> Any:
        if not _eligible(t) or t.dtype == dt:
            return t
        self.casts += 1
        if not (t.is_leaf and t.requires_grad and t._base is None):
            return t.to(dt)
        key = id(t)
        hit = self.cache.get(key)
        if hit is not None and hit[0] is t and hit[1] == t._version and hit[2] == dt:
            return hit[3]
        low = t.to(dt)
        self.cache[key] = (t, t._version, dt, low)
        return low


def _tensors(obj: Any) -> list[Any]:
    import torch  # noqa: PLC0415
    from torch.utils._pytree import tree_leaves  # noqa: PLC0415

    return [x for x in tree_leaves(obj) if isinstance(x, torch.Tensor)]


def _map(obj: Any, fn: Any) -> Any:
    import torch  # noqa: PLC0415
    from torch.utils._pytree import tree_map  # noqa: PLC0415

    return tree_map(lambda x: fn(x) if isinstance(x, torch.Tensor) else x, obj)


def _eligible(t: Any) -> bool:
    import torch  # noqa: PLC0415

    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype in (torch.float32, torch.float16, torch.bfloat16)
    )


def _first(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args:
        return args[0]
    return next(iter(kwargs.values()), None)


def _widest(dtypes: list[Any]) -> Any:
    """autocast ``promote``: float32 if any input is float32 (or the low dtypes are mixed)."""
    import torch  # noqa: PLC0415

    kinds = set(dtypes)
    if torch.float32 in kinds or len(kinds) > 1:
        return torch.float32
    return dtypes[0]
