"""Per-tensor state of one FP8 layer: amax histories, scales, per-step records, SR generator.

Shared by :mod:`fpemu.nn.fp8` (per-tensor recipes), :mod:`fpemu.nn.fp8_block` (MX/NVFP4) and
:mod:`fpemu.nn.fp8_scaled` (row-wise/blockwise FP8). The delayed-scaling update is TE's fused
bulk kernel (fp8-mx.md §4.1, via :func:`fpemu.quant.te_delayed_update`).

>>> st = FP8State("te_delayed")
>>> float(st.scale_for("input", 2.0)), st.history["input"][:2].tolist()
(1.0, [2.0, 0.0])
>>> st.update(); float(st.scale["input"])
224.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.recipes import Recipe, RoleSpec, get_recipe
from fpemu.formats import get_format
from fpemu.quant import te_delayed_update, te_scale, torchao_scale

F32 = np.float32
ROLES = ("input", "weight", "grad_output")


class FP8State:
    """Mutable per-tensor state of one FP8 layer: amax histories, scales, per-step records.

    ``history[role]`` is float32 (amax_history_len,) with slot 0 the amax being measured;
    ``scale[role]`` float32 (init 1, TE). ``records`` holds one dict per forward+backward:
    role -> amax, scale, saturated, flushed, subnormal (fractions of the tensor's elements).
    """

    def __init__(self, recipe: Recipe | str, *, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed={seed!r}; accepted: an int >= 0")
        self.recipe = get_recipe(recipe)
        n = self.recipe.amax_history_len
        self.history = {r: np.zeros(n, F32) for r in ROLES}
        self.scale = {r: F32(1.0) for r in ROLES}
        self.records: list[dict[str, dict[str, float]]] = []
        #: role -> (quantized values, scale) of the latest quantize (for inspection and tests)
        self.last: dict[str, tuple[Any, Any]] = {}
        #: random bits of stochastic rounding (NVFP4 gradients), seeded for reproducibility
        self.rng = np.random.default_rng(seed)

    def scale_for(self, role: str, amax: Any) -> Any:
        """The scale this recipe uses to quantize ``role`` whose current amax is ``amax``."""
        spec: RoleSpec = self.recipe.roles()[role]
        fmt, r = spec.fmt, self.recipe
        if spec.scale_rule == "none":
            return F32(1.0)
        if spec.scale_rule == "te_delayed":
            self.history[role][0] = F32(amax)  # the quantize kernel writes history row 0 (§4.1)
            return self.scale[role]
        if spec.scale_rule == "te_current":
            return F32(te_scale(np.float32(amax), fmt, margin=int(r.margin), power_2=spec.power_2,
                                epsilon=r.epsilon))  # fmt: skip
        return F32(torchao_scale(np.float32(amax), fmt, power_of_2=spec.power_2))

    def update(self) -> None:
        """TE's delayed-scaling update after the step (§4.1): roll histories, new scales."""
        for role, spec in self.recipe.roles().items():
            if spec.scale_rule != "te_delayed":
                continue
            h, s = te_delayed_update(self.history[role][:, None], np.array([self.scale[role]], F32),
                                     spec.fmt, margin=int(self.recipe.margin),
                                     algo=self.recipe.amax_compute_algo)  # fmt: skip
            self.history[role], self.scale[role] = h[:, 0].astype(F32), F32(s[0])

    def _record(self, role: str, amax: Any, scale: Any, x: Any, q: Any) -> None:
        f = get_format(self.recipe.roles()[role].fmt)
        with np.errstate(all="ignore"):
            y = np.abs(np.asarray(x, F32) * F32(scale))
        nz = x != 0
        n = max(x.size, 1)
        if role == "input":  # the forward's first quantize opens the step's record
            self.records.append({})
        self.records[-1][role] = {
            "amax": float(amax),
            "scale": float(scale),
            "saturated": float(np.count_nonzero(y > f.max)) / n,
            "flushed": float(np.count_nonzero(nz & (q == 0))) / n,
            "subnormal": float(np.count_nonzero((q != 0) & (np.abs(q) < f.tiny))) / n,
        }
