"""FP8 / MX / NVFP4 recipes for the Linear layers of a program under ``fpemu.emulate``.

With ``recipe=`` every ``F.linear`` call made by a ``torch.nn.Linear`` module's own forward runs
as :func:`fpemu.nn.fp8.fp8_linear` computes it (the recipe registry
:data:`fpemu.amp.recipes.RECIPES`: ``te_delayed``, ``te_current``, ``te_mxfp8``, ``te_nvfp4``,
``te_blockwise``, ``torchao_tensorwise``, ``torchao_rowwise``, ``deepseek_v3``, ...): fprop,
dgrad and wgrad operands quantized per role with the recipe's scales, the GEMMs on the recipe's
FP8/FP4 tensor-core path (its own accumulation; ``model`` does not apply to them), bias in the
FP32 epilogue. One :class:`fpemu.nn.fp8.FP8State` per module (amax histories, scales, per-step
records) is kept in ``em.state["blocks.0.fc"]`` (the module's dotted path from the outermost
module called), inspectable after the run. The output is float32, rounded to the policy's
compute dtype inside an autocast region (Transformer Engine returns the autocast dtype).

Other GEMMs (attention's ``bmm``, a Linear's bias-free ``matmul`` outside a module) keep the
policy and model, as TE's recipes quantize only its Linear layers.

>>> check_recipe("te_delayed")
'te_delayed'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["RecipeHooks", "check_recipe"]


def check_recipe(recipe: Any) -> str:
    """``recipe`` if it names a recipe :func:`fpemu.nn.fp8.fp8_linear` runs, else ValueError."""
    from fpemu.amp.recipes import RECIPES  # noqa: PLC0415
    from fpemu.nn.fp8 import supported  # noqa: PLC0415

    names = sorted(n for n in RECIPES if supported(n))
    if not isinstance(recipe, str):
        raise TypeError(f"recipe must be a recipe name (str) or None, got {recipe!r}")
    if recipe not in names:
        raise ValueError(f"recipe={recipe!r} is not a recipe; accepted: {', '.join(names)}")
    return recipe


class _State:
    """One module's FP8State with a one-line description for the summary."""

    def __init__(self, recipe: str) -> None:
        from fpemu.nn.fp8 import FP8State  # noqa: PLC0415

        self.fp8 = FP8State(recipe)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fp8, name)

    def trace(self, role: str, key: str) -> list[float]:
        """``key`` (``amax``, ``scale``, ``saturated``, ``flushed``) of ``role`` per step."""
        return [r[role][key] for r in self.fp8.records if role in r]

    def describe(self) -> str:
        """Steps, and the last step's amax and scale per role."""
        recs = self.fp8.records
        if not recs:
            return "no steps"
        last = recs[-1]
        roles = ", ".join(
            f"{role} amax {v['amax']:.4g} scale {v['scale']:.4g}" for role, v in last.items()
        )
        return f"{len(recs)} step(s); last: {roles}"


class RecipeHooks:
    """Tracks the running ``nn.Linear`` modules and runs their ``F.linear`` under the recipe."""

    def __init__(self, recipe: str, *, compute: Any) -> None:
        self.recipe = check_recipe(recipe)
        self.compute = compute
        self.state: dict[str, _State] = {}
        self._stack: list[Any] = []
        self._names: dict[int, str] = {}

    @contextlib.contextmanager
    def installed(self, dispatch_mode: Any) -> Iterator[None]:
        """Global module hooks for the block: the stack of running modules, their names."""
        import torch  # noqa: PLC0415
        from torch.nn.modules import module as nn_module  # noqa: PLC0415

        def pre(mod: Any, args: Any) -> None:
            if not self._stack and id(mod) not in self._names:
                self._names.update({id(m): n for n, m in mod.named_modules()})
            self._stack.append(mod)

        def post(mod: Any, args: Any, out: Any) -> None:
            if self._stack and self._stack[-1] is mod:
                self._stack.pop()

        handles = [
            nn_module.register_module_forward_pre_hook(pre),
            nn_module.register_module_forward_hook(post),
        ]
        self._linear = torch.nn.Linear
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def wants(self, args: tuple[Any, ...]) -> Any:
        """The running Linear module whose own weight is ``args[1]``, else None."""
        if not self._stack:
            return None
        mod = self._stack[-1]
        if isinstance(mod, self._linear) and len(args) > 1 and args[1] is mod.weight:
            return mod
        return None

    def linear(self, mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], on: bool) -> Any:
        """``F.linear(x, w, b)`` of module ``mod`` under the recipe (differentiable)."""
        name = self._names.get(id(mod), f"linear@{id(mod):x}")
        st = self.state.get(name)
        if st is None:
            st = self.state[name] = _State(self.recipe)
        x = args[0]
        b = args[2] if len(args) > 2 else kwargs.get("bias")
        y = _fn().apply(x, mod.weight, b, st.fp8, self.recipe)
        return y.to(self.compute) if on and self.compute is not None else y


_FN: list[Any] = []


def _fn() -> Any:
    """The autograd Function (built once, on first use: it needs torch)."""
    if _FN:
        return _FN[0]
    import torch  # noqa: PLC0415

    from fpemu.nn.fp8 import fp8_linear  # noqa: PLC0415
    from fpemu.nn.tensor import Tensor  # noqa: PLC0415

    def f32(t: Any) -> np.ndarray:
        return np.asarray(t.detach().float().numpy(), np.float32)

    class FP8Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, w: Any, b: Any, state: Any, recipe: str) -> Any:
            lead = x.shape[:-1]
            xt = Tensor(f32(x).reshape(-1, x.shape[-1]), "float32", requires_grad=True)
            wt = Tensor(f32(w), "float32", requires_grad=True)
            bt = None if b is None else Tensor(f32(b), "float32", requires_grad=True)
            out = fp8_linear(xt, wt, bt, recipe=recipe, state=state)
            ctx.fpemu = (out, xt, wt, bt, lead, x.dtype, w.dtype, None if b is None else b.dtype)
            y = np.asarray(out.data, np.float32).reshape(*lead, w.shape[0])
            return torch.from_numpy(y.copy())

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            out, xt, wt, bt, lead, xd, wd, bd = ctx.fpemu
            out.grad = f32(g).reshape(-1, g.shape[-1])
            out._backward()

            def back(t: Any, dt: Any, shape: Any) -> Any:
                if t is None or t.grad is None:
                    return None
                return torch.from_numpy(np.asarray(t.grad, np.float32).reshape(shape)).to(dt)

            gx = back(xt, xd, (*lead, xt.shape[1]))
            return (
                gx,
                back(wt, wd, wt.shape),
                back(bt, bd, None if bt is None else bt.shape),
                None,
                None,
            )

    _FN.append(FP8Linear)
    return FP8Linear
