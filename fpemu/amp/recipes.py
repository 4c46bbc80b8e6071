"""FP8/FP4 training recipes as data: per tensor role, the format, scale granularity and rule.

A :class:`Recipe` holds only defining fields; per-tensor state (amax history, scale) lives in
:class:`fpemu.nn.fp8.FP8State`, owned by the layer. Each preset cites the research note
(``fp8-mx.md``, section numbers) it transcribes.

Roles: ``weight``, ``input`` (activation), ``grad_output``. HYBRID (TE's default) means E4M3
for the forward tensors and E5M2 for gradients (fp8-mx.md §4.1).

"Cannot hold gradients" (validation): a per-tensor (``tensor``/``row``) gradient format with
no scaling (``scale_rule="none"``) must have E5M2's range; unscaled E4M3 (max 448, smallest
subnormal 2**-9) loses typical gradients (1e-4 .. 1e-6) to underflow, so it is rejected. An
MX/NVFP4 granularity needs the element format its block format defines (``nvfp4_2d``: NVFP4
with 16x16 tiles, for weights, fp8-mx.md §3.4). ``wgrad_rht`` (the Hadamard transform of the
wgrad operands, §3.5) needs NVFP4 input and grad_output.

>>> r = get_recipe("te_delayed")
>>> r.input.fmt, r.grad_output.fmt, r.amax_history_len, r.fprop, r.dgrad
('float8_e4m3fn', 'float8_e5m2', 1024, 'fast', 'split')
>>> sorted(RECIPES)[:3]
['deepseek_v3', 'fp8_noscale', 'te_blockwise']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fpemu.formats import get_format

GRANULARITIES = ("tensor", "row", "block1x128", "block128x128", "mx", "nvfp4", "nvfp4_2d")
SCALE_RULES = ("none", "te_delayed", "te_current", "torchao", "deepseek", "mx", "nvfp4")
AMAX_ALGOS = ("max", "most_recent")
ACCUMULATIONS = ("fast", "split")
_FP8 = ("float8_e4m3fn", "float8_e5m2")
_BLOCK_ELEMENT = {"mx": _FP8, "nvfp4": ("float4_e2m1fn",), "nvfp4_2d": ("float4_e2m1fn",)}


@dataclass(frozen=True)
class RoleSpec:
    """How one tensor role is quantized.

    >>> RoleSpec("e4m3", "tensor", "te_current").fmt
    'float8_e4m3fn'
    """

    fmt: str
    granularity: str = "tensor"
    scale_rule: str = "te_current"
    power_2: bool = False
    stochastic: bool = False  # stochastic rounding (NVFP4 gradients, fp8-mx.md §3.6)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", get_format(self.fmt, arg="fmt").name)
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity={self.granularity!r}; accepted: "
                             f"{', '.join(GRANULARITIES)}")  # fmt: skip
        if self.scale_rule not in SCALE_RULES:
            raise ValueError(f"scale_rule={self.scale_rule!r}; accepted: "
                             f"{', '.join(SCALE_RULES)}")  # fmt: skip
        ok = _BLOCK_ELEMENT.get(self.granularity, _FP8)
        if self.fmt not in ok:
            raise ValueError(f"fmt={self.fmt!r} with granularity={self.granularity!r}; "
                             f"accepted: {', '.join(ok)}")  # fmt: skip


@dataclass(frozen=True)
class Recipe:
    """An FP8 training recipe: three roles, delayed-scaling parameters, GEMM accumulation.

    ``fprop``/``dgrad``/``wgrad``: ``"fast"`` (one tensor-core chain over K) or ``"split"``
    (promote to FP32 every 128 elements of K), fp8-mx.md §4.4. ``master``: master weight
    format (float32 or bfloat16). ``wgrad_rht``: random Hadamard transform of the wgrad
    operands (NVFP4 only, fp8-mx.md §3.5).
    """

    name: str
    weight: RoleSpec
    input: RoleSpec
    grad_output: RoleSpec
    amax_history_len: int = 1
    amax_compute_algo: str = "max"
    margin: int = 0
    epsilon: float = 0.0
    fprop: str = "fast"
    dgrad: str = "split"
    wgrad: str = "split"
    master: str = "float32"
    wgrad_rht: bool = False

    def __post_init__(self) -> None:
        n = self.amax_history_len
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"amax_history_len={n!r}; accepted: an int >= 1")
        if self.amax_compute_algo not in AMAX_ALGOS:
            raise ValueError(f"amax_compute_algo={self.amax_compute_algo!r}; accepted: "
                             f"{', '.join(AMAX_ALGOS)}")  # fmt: skip
        m = self.margin
        if isinstance(m, bool) or not isinstance(m, int | float) or not math.isfinite(m) \
                or m != int(m):  # fmt: skip
            raise ValueError(f"margin={m!r}; accepted: a finite integer (a power-of-two shift)")
        e = self.epsilon
        if not isinstance(e, int | float) or not math.isfinite(e) or e < 0:
            raise ValueError(f"epsilon={e!r}; accepted: a finite float >= 0")
        for gemm in ("fprop", "dgrad", "wgrad"):
            if getattr(self, gemm) not in ACCUMULATIONS:
                raise ValueError(f"{gemm}={getattr(self, gemm)!r}; accepted: fast, split")
        master = get_format(self.master, arg="master").name
        if master not in ("float32", "bfloat16"):
            raise ValueError(f"master={self.master!r}; accepted: float32, bfloat16")
        object.__setattr__(self, "master", master)
        if not isinstance(self.wgrad_rht, bool):
            raise TypeError(f"wgrad_rht={self.wgrad_rht!r}; accepted: True, False")
        if self.wgrad_rht and not (self.input.granularity == self.grad_output.granularity
                                   == "nvfp4"):  # fmt: skip
            raise ValueError("wgrad_rht=True; accepted only with nvfp4 input and grad_output "
                             "(TE's NVFP4 recipe, fp8-mx.md §3.5)")  # fmt: skip
        g = self.grad_output
        if g.scale_rule == "none" and g.granularity in ("tensor", "row") \
                and g.fmt != "float8_e5m2":  # fmt: skip
            raise ValueError(
                f"grad_output.fmt={g.fmt!r} cannot hold unscaled gradients "
                "(underflow below 2**-9); accepted: float8_e5m2, or a scale rule"
            )

    def roles(self) -> dict[str, RoleSpec]:
        """``{"weight": ..., "input": ..., "grad_output": ...}``."""
        return {"weight": self.weight, "input": self.input, "grad_output": self.grad_output}


Roles = tuple[RoleSpec, RoleSpec, RoleSpec]  # weight, input, grad_output (Recipe's order)


def _hybrid(rule: str) -> Roles:
    """TE HYBRID: E4M3 weight and input, E5M2 grad_output, per tensor."""
    return (RoleSpec("e4m3", "tensor", rule), RoleSpec("e4m3", "tensor", rule),
            RoleSpec("e5m2", "tensor", rule))  # fmt: skip


def _all_e4m3(wg: str, xg: str, gg: str, rule: str, pow2: bool) -> Roles:
    return (RoleSpec("e4m3", wg, rule, pow2), RoleSpec("e4m3", xg, rule, pow2),
            RoleSpec("e4m3", gg, rule, pow2))  # fmt: skip


RECIPES: dict[str, Recipe] = {
    # FP8 casts with no scaling at all (HYBRID formats): the failure baseline.
    "fp8_noscale": Recipe("fp8_noscale", *_hybrid("none")),
    # TE DelayedScaling defaults: HYBRID, history 1024, 'max', margin 0 (fp8-mx.md §4.1, §4.4).
    "te_delayed": Recipe("te_delayed", *_hybrid("te_delayed"), amax_history_len=1024),
    # TE Float8CurrentScaling: HYBRID, no pow2, eps 0; fprop fast, dgrad/wgrad split (§4.2).
    "te_current": Recipe("te_current", *_hybrid("te_current")),
    # TE MXFP8BlockScaling: E4M3 elements, 1x32 E8M0 blocks; fprop fast, others split (§1, §4.4).
    "te_mxfp8": Recipe("te_mxfp8", *_all_e4m3("mx", "mx", "mx", "mx", True)),
    # TE Float8BlockScaling: 1x128 activations/grads, 128x128 weights, pow2, all split (§5.2).
    "te_blockwise": Recipe(
        "te_blockwise",
        *_all_e4m3("block128x128", "block1x128", "block1x128", "te_current", True),
        fprop="split",
    ),
    # TE NVFP4BlockScaling defaults (§3.1): E2M1 in 16-blocks, 2-D 16x16 weight tiles (§3.4),
    # SR on gradients (§3.6), RHT on the wgrad operands (§3.5); TE order of scales (§3.2).
    "te_nvfp4": Recipe(
        "te_nvfp4",
        weight=RoleSpec("e2m1", "nvfp4_2d", "nvfp4"),
        input=RoleSpec("e2m1", "nvfp4", "nvfp4"),
        grad_output=RoleSpec("e2m1", "nvfp4", "nvfp4", stochastic=True),
        wgrad_rht=True,
    ),
    # torchao tensorwise: E4M3 input/weight, E5M2 grad_output, fast accum for fprop only (§4.3).
    "torchao_tensorwise": Recipe(
        "torchao_tensorwise", *_hybrid("torchao"), dgrad="split", wgrad="split"
    ),
    # torchao rowwise: all E4M3, axiswise scales, round_scales_to_power_of_2 (§4.3).
    "torchao_rowwise": Recipe("torchao_rowwise", *_all_e4m3("row", "row", "row", "torchao", True)),
    # DeepSeek-V3: 1x128 activation tiles, 128x128 weights, pow2 (E8M0) scales, FP32 promotion
    # every 128 K (fp8-mx.md §5.1, §2.1).
    "deepseek_v3": Recipe(
        "deepseek_v3",
        *_all_e4m3("block128x128", "block1x128", "block1x128", "deepseek", True),
        fprop="split",
    ),
}


def get_recipe(recipe: Recipe | str, **changes: object) -> Recipe:
    """Resolve a name (or pass a Recipe through); ``changes`` override fields (validated).

    >>> get_recipe("te_delayed", amax_history_len=16, amax_compute_algo="most_recent").margin
    0
    >>> get_recipe("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: recipe='nope'; accepted: deepseek_v3, fp8_noscale, te_blockwise, ...
    """
    if isinstance(recipe, Recipe):
        r = recipe
    elif isinstance(recipe, str) and recipe in RECIPES:
        r = RECIPES[recipe]
    else:
        names = sorted(RECIPES)
        raise ValueError(f"recipe={recipe!r}; accepted: {', '.join(names)}")
    return replace(r, **changes) if changes else r  # type: ignore[arg-type]
