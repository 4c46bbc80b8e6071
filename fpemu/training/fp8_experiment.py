"""The FP8 experiment: FP8 recipes against FP32 and BF16 on the same data, seeds and batches.

Rows (:data:`FP8_RUNS`): FP32 and BF16 autocast baselines; FP8 casts without scaling
(``fp8_noscale``); Transformer Engine delayed scaling (``te_delayed``, history 16, fp8-mx.md
§4.1) and current scaling (``te_current``, §4.2); torchao tensorwise and rowwise (§4.3);
blockwise FP8 (``te_blockwise`` §5.2, ``deepseek_v3`` §5.1); MXFP8 (``te_mxfp8``) and NVFP4
(``te_nvfp4``); and FP32, delayed and current scaling with an activation spike: at the
``spike_steps`` the input batch is multiplied by ``spike`` (x100), so the delayed scale
computed from earlier steps is stale and the spiked tensor saturates at E4M3's 448 for that
step, while current scaling adapts at once (and, like FP32, takes the full spiked step).

The default data set is ``digits`` (8x8 images, 64 features, 10 classes; ships with fpemu):
the 64-32-10 MLP runs every row in about 3 s on one CPU core.

Each row records the loss per step, the test accuracy and, for FP8 rows, the per-step trace of
each layer's input/weight/grad_output (amax, scale, saturated, flushed, subnormal fractions).

>>> res = run_fp8_experiment(runs=("FP32", "TE delayed"), steps=3)
>>> [r.run for r in res], len(res[1].trace["layers.0"])
(['FP32', 'TE delayed'], 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fpemu.amp.recipes import get_recipe
from fpemu.nn import MLP
from fpemu.nn.fp8 import FP8Linear, fp8_mlp
from fpemu.training.datasets import get_dataset
from fpemu.training.loop import accuracy, make_optimizer, make_scaler, train_step

#: run label -> (policy, recipe or None, spike the inputs?)
FP8_RUNS: dict[str, tuple[str, str | None, bool]] = {
    "FP32": ("fp32", None, False),
    "BF16": ("torch_cuda_bf16", None, False),
    "FP8, no scaling": ("fp32", "fp8_noscale", False),
    "TE delayed": ("fp32", "te_delayed", False),
    "TE current": ("fp32", "te_current", False),
    "torchao tensorwise": ("fp32", "torchao_tensorwise", False),
    "torchao rowwise": ("fp32", "torchao_rowwise", False),
    "TE blockwise": ("fp32", "te_blockwise", False),
    "DeepSeek-V3": ("fp32", "deepseek_v3", False),
    "MXFP8": ("fp32", "te_mxfp8", False),
    "NVFP4": ("fp32", "te_nvfp4", False),
    "FP32 + spike": ("fp32", None, True),
    "TE delayed + spike": ("fp32", "te_delayed", True),
    "TE current + spike": ("fp32", "te_current", True),
}


@dataclass
class FP8Row:
    """One run: label, losses per step, test accuracy, FP8 trace per layer."""

    run: str
    losses: list[float]
    accuracy: float
    trace: dict[str, list[dict[str, dict[str, float]]]] = field(default_factory=dict)

    def saturated_steps(self, layer: str = "layers.0", role: str = "input") -> list[int]:
        """Steps where some of ``role``'s elements saturated."""
        return [i for i, t in enumerate(self.trace.get(layer, [])) if t[role]["saturated"] > 0]


def run_fp8_experiment(
    *,
    runs: Sequence[str] = tuple(FP8_RUNS),
    dataset: str = "digits",
    hidden: Sequence[int] = (32,),
    steps: int = 40,
    batch_size: int = 64,
    lr: float = 0.05,
    seed: int = 0,
    history: int = 16,
    spike: float = 100.0,
    spike_steps: Sequence[int] = (20,),
) -> list[FP8Row]:
    """Train each run of ``runs`` on the same batches; returns one :class:`FP8Row` each.

    ``history`` is the TE delayed-scaling amax history length used by ``te_delayed`` rows.
    """
    unknown = [r for r in runs if r not in FP8_RUNS]
    if unknown:
        raise ValueError(f"runs={unknown!r}; accepted: {', '.join(FP8_RUNS)}")
    data = get_dataset(dataset, seed=seed)
    sizes = [data.features, *hidden, data.classes]
    n = len(data.x_train)
    batches = [np.random.default_rng(seed + i).choice(n, batch_size, replace=False)
               for i in range(steps)]  # fmt: skip
    rows = []
    for name in runs:
        policy, recipe, spiked = FP8_RUNS[name]
        if recipe is None:
            model = MLP(sizes, policy=policy, seed=seed)
        else:
            rec = get_recipe(recipe, amax_history_len=history) if recipe == "te_delayed" \
                else get_recipe(recipe)  # fmt: skip
            model = fp8_mlp(sizes, recipe=rec, seed=seed)
        opt = make_optimizer("sgd", model, lr=lr, momentum=0.9)
        scaler = make_scaler(None, model.policy)
        losses = []
        with np.errstate(all="ignore"):
            for i, idx in enumerate(batches):
                x = data.x_train[idx]
                if spiked and i in spike_steps:
                    x = (x * np.float32(spike)).astype(np.float32)
                rec_, _ = train_step(model, opt, scaler, x, data.y_train[idx], step=i,
                                     stats=False)  # fmt: skip
                losses.append(rec_.loss)
        trace = {lin.name: list(lin.state.records) for lin in model.layers
                 if isinstance(lin, FP8Linear) and lin.state is not None}  # fmt: skip
        rows.append(FP8Row(name, losses, accuracy(model, data.x_test, data.y_test), trace))
    return rows
