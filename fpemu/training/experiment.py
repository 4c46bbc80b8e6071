"""The mixed-precision experiment: where FP16 training fails, and what fixes it.

Three configurations, each trained in the eight runs listed below, with fixed seeds
(:func:`run_experiment`):

- ``digits``: scikit-learn's 8x8 digits (1437 train / 360 test images), MLP 64-64-10 with
  ReLU, SGD (lr 0.1, momentum 0.9), batch 64, cross-entropy.
- ``underflow``: the same training with the loss multiplied by ``2**-18`` and the learning
  rate by ``2**18``. In exact (and FP32, and BF16) arithmetic this is the *same* training:
  both factors are powers of two, so every update is bit-identical. Only the gradient magnitudes
  change: the logit gradients drop to ~1e-7 and below, under FP16's smallest subnormal
  (2**-24 = 6e-8) and into its subnormal range, so FP16 without loss scaling flushes most of
  them to zero. This is the "small loss" situation loss scaling was invented for.
- ``adam``: the ``digits`` training with Adam (lr 3e-3, eps 1e-8) instead of SGD. Adam's
  state lives in the parameter format unless there are master weights: in pure FP16 the
  second moment of small gradients underflows to 0 and eps = 1e-8 is itself below FP16's
  smallest subnormal, so ``m / (sqrt(v) + eps)`` becomes 0/0 = NaN.

Runs: FP32; PyTorch-CUDA-style FP16 autocast without scaling; the same with torch's dynamic
``GradScaler``; BF16 autocast without scaling; pure FP16 (``.half()`` model, no master weights,
no scaling); and FP16 autocast with the two loss-scaling mistakes people write: the tutorial
scaler (doubles every clean step, halves on overflow, steps first and checks afterwards; also
with skipping added) and a ``GradScaler`` built anew in every step (its scale never adapts).
The table reports test accuracy, skipped steps and the fraction of parameter gradient values
that were zero in the gradient format (averaged over steps and layers); the FP32 row is the
baseline of genuine zeros (dead ReLUs), the excess over it is gradient flushed by underflow.

>>> rows = run_experiment(configs=("digits",), runs=("FP32",), steps=2, progress=False).rows
>>> rows[0].config, rows[0].run, rows[0].skipped
('digits', 'FP32', 0)
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fpemu.training.loop import train

#: run label -> (policy preset, scaler name or None)
RUNS: dict[str, tuple[str, str | None]] = {
    "FP32": ("fp32", None),
    "FP16, no scaling": ("torch_cuda_fp16", None),
    "FP16 + dynamic scaling": ("torch_cuda_fp16", "torch"),
    "BF16, no scaling": ("torch_cuda_bf16", None),
    "pure FP16, no master weights": ("naive_fp16", None),
    # the classic loss-scaling mistakes (fpemu.amp.scaling.mistakes), beside GradScaler above
    "FP16 + tutorial scaler (step, then check)": ("torch_cuda_fp16", "tutorial"),
    "FP16 + tutorial scaler with skipping": ("torch_cuda_fp16", "tutorial_skip"),
    "FP16 + GradScaler built every step": ("torch_cuda_fp16", "fresh_gradscaler"),
}

#: configuration name -> keyword arguments of :func:`fpemu.training.train`
CONFIGS: dict[str, dict[str, Any]] = {
    "digits": {"dataset": "digits", "hidden": (64,), "lr": 0.1, "loss_weight": 1.0},
    "underflow": {"dataset": "digits", "hidden": (64,), "lr": 0.1 * 2.0**18,
                  "loss_weight": 2.0**-18},
    "adam": {"dataset": "digits", "hidden": (64,), "lr": 3e-3, "loss_weight": 1.0,
             "optimizer": "adam"},
}  # fmt: skip

#: The command that writes the docs page (the defaults: every configuration, 300 steps).
COMMAND = "fpemu experiment --write docs/mixed-precision-experiment.md"


@dataclass
class Row:
    """One training run of the experiment."""

    config: str
    run: str
    policy: str
    scaler: str
    accuracy: float
    skipped: int
    zero_pct: float
    zero_pct_unscaled: float
    final_loss: float
    seconds: float
    #: per step: the loss (unweighted, as ``final_loss``) and the loss scale used; for the
    #: pictures of :meth:`ExperimentResult.to_html`, left out of :meth:`ExperimentResult.to_dict`
    losses: list[float] = field(default_factory=list, repr=False)
    scales: list[float] = field(default_factory=list, repr=False)


@dataclass
class ExperimentResult:
    """All rows plus the settings; :meth:`to_markdown` renders the table."""

    steps: int
    seed: int
    acc_model: str
    rows: list[Row] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: the settings and the table (the per-step curves of each row
        are left out: 2 x steps numbers per run, and NaN where a run diverged)."""
        d = asdict(self)
        for row in d["rows"]:
            del row["losses"], row["scales"]
        return d

    def to_html(self) -> str:
        """A self-contained HTML page: loss curves of every run and the loss scale of the
        scaled ones (pictures), and one sortable table per configuration (see
        :mod:`fpemu.training.experiment_html`)."""
        from fpemu.training.experiment_html import experiment_page  # noqa: PLC0415

        return experiment_page(self)

    def to_markdown(self) -> str:
        """One Markdown table per configuration."""
        out: list[str] = []
        for cfg in dict.fromkeys(r.config for r in self.rows):
            rows = [r for r in self.rows if r.config == cfg]
            base = next((r for r in rows if r.run == "FP32"), None)
            out += [f"### `{cfg}`", "",
                    "| run | policy | scaler | test accuracy | vs FP32 (points) | skipped steps "
                    "| zero grads % | zero grads % before scaling | final loss (unweighted) |",
                    "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
            for r in rows:
                delta = "" if base is None else f"{100 * (r.accuracy - base.accuracy):+.1f}"
                out.append(
                    f"| {r.run} | `{r.policy}` | {r.scaler} | {100 * r.accuracy:.1f}% | {delta} "
                    f"| {r.skipped} | {r.zero_pct:.1f} | {r.zero_pct_unscaled:.1f} "
                    f"| {r.final_loss:.4g} |"
                )
            out.append("")
        return "\n".join(out)


def run_experiment(
    *,
    configs: Sequence[str] = tuple(CONFIGS),
    runs: Sequence[str] = tuple(RUNS),
    steps: int = 300,
    seed: int = 0,
    batch_size: int = 64,
    acc_model: str = "fast",
    progress: bool = True,
) -> ExperimentResult:
    """Train every (configuration, run) pair and collect the table rows.

    Raises:
        ValueError: an unknown configuration or run label.
    """
    for c in configs:
        if c not in CONFIGS:
            raise ValueError(f"unknown config={c!r}; choose from {', '.join(CONFIGS)}")
    for r in runs:
        if r not in RUNS:
            raise ValueError(f"unknown run={r!r}; choose from {', '.join(RUNS)}")
    res = ExperimentResult(steps=steps, seed=seed, acc_model=acc_model)
    for c in configs:
        kw = CONFIGS[c]
        for label in runs:
            policy, scaler = RUNS[label]
            t0 = time.perf_counter()
            tr = train(kw["dataset"], hidden=kw["hidden"], policy=policy, scaler=scaler,
                       steps=steps, lr=kw["lr"], loss_weight=kw["loss_weight"], seed=seed,
                       optimizer=kw.get("optimizer", "sgd"),
                       batch_size=batch_size, acc_model=acc_model, progress=progress)  # fmt: skip
            unscaled = [v["before_scaling"]["zero"] for v in tr.grad_stats.values()]
            res.rows.append(Row(
                config=c, run=label, policy=policy, scaler=tr.config["scaler"],
                accuracy=tr.final_accuracy, skipped=tr.skipped_steps,
                zero_pct=100 * tr.zero_fraction(),
                zero_pct_unscaled=100 * sum(unscaled) / max(len(unscaled), 1),
                final_loss=tr.final_loss / kw["loss_weight"],
                seconds=time.perf_counter() - t0,
                losses=[st.loss / kw["loss_weight"] for st in tr.steps],
                scales=[st.scale for st in tr.steps],
            ))  # fmt: skip
    return res


def command(res: ExperimentResult, path: str = "docs/mixed-precision-experiment.md") -> str:
    """The command line that reproduces ``res`` and writes its report to ``path``: the
    configurations run (when not all of them) and every setting that is not the default.

    >>> command(ExperimentResult(steps=5, seed=0, acc_model="fast",
    ...                          rows=[Row("adam", "FP32", "fp32", "none", 1, 0, 0, 0, 0, 0)]))
    'fpemu experiment --config adam --steps 5 --write docs/mixed-precision-experiment.md'
    """
    configs = list(dict.fromkeys(r.config for r in res.rows))
    words = ["fpemu experiment"]
    if configs != list(CONFIGS):
        words += [f"--config {c}" for c in configs]
    for flag, value, default in (("--steps", res.steps, 300), ("--seed", res.seed, 0),
                                 ("--acc-model", res.acc_model, "fast")):  # fmt: skip
        if value != default:
            words.append(f"{flag} {value}")
    return " ".join([*words, f"--write {path}"])


def markdown_doc(text: str) -> str:
    """A docstring as Markdown: ``x`` and :func:`x` become `x`.

    >>> markdown_doc("``m / v`` with :func:`train` and ``2**-18``")
    '`m / v` with `train` and `2**-18`'
    """
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text)


def report(res: ExperimentResult, elapsed: float,
           path: str = "docs/mixed-precision-experiment.md") -> str:  # fmt: skip
    """The Markdown document ``docs/mixed-precision-experiment.md`` (written to ``path``)."""
    doc = markdown_doc((__doc__ or "").split(">>>")[0].strip())
    cmd = command(res, path)
    return (
        "# Mixed-precision experiment\n\n"
        f"Reproduce with:\n\n```\n{cmd}\n```\n\n"
        f"({res.steps} steps per run, seed {res.seed}, matmul accumulation model "
        f"`{res.acc_model}`; {elapsed:.0f} s for all runs on this machine.)\n\n"
        f"{doc}\n\n## Results\n\n{res.to_markdown()}\n## Reading the table\n\n"
        + "\n".join(f"- {line}" for line in summary(res))
        + "\n\n"
        + NOTES
    )


NOTES = """## Notes

- "zero grads %" counts parameter-gradient values equal to zero in the gradient format, after
  the loss scale was applied (the gradients the backward pass produced), averaged over steps and
  layers. "before scaling" divides those values by the scale and rounds them to the same format:
  what the gradients would have been without the scaler. The FP32 row's zeros are genuine (dead
  ReLU units); the excess over it is underflow.
- Without scaling, the FP16 gradients that survive the underflow are the largest entries, and
  many of them land in FP16's subnormal range where only a few bits are left: the update is
  sparse and biased, and with the large learning rate of the `underflow` configuration the
  FP16-without-scaling run diverges rather than merely stalling.
- A model whose parameters became NaN predicts nothing: its accuracy is 0% (pure FP16 with
  Adam, where eps = 1e-8 rounds to 0 in FP16 state and 0/0 appears in the first steps).
- Pure FP16 with SGD survives the `underflow` configuration here although most of its
  gradient values are flushed: what is left is enough for this small problem. Its failure
  shows with Adam, and in the unit tests where updates below half an FP16 ulp vanish.
- The tutorial scaler (`tutorial`) doubles its scale after every clean step and checks for
  overflow only after `optimizer.step()`: its first overflow writes inf/NaN into the weights
  (accuracy 0%). With skipping added (`tutorial_skip`) the weights survive, but the scale
  climbs back to the overflow point after every halving, so about every other step is skipped.
  A `GradScaler` built anew every step (`fresh_gradscaler`) scales by 2**16 forever: identical
  to GradScaler here, where 2**16 fits these gradients and 300 steps are fewer than its growth
  interval of 2000, but it skips every step of a model whose gradients overflow at 2**16
  (docs/loss-scaling.md).
- The `fast` accumulation model is NumPy's float32 BLAS matmul (order unspecified), so the last
  digits can change with the BLAS build or memory layout; `--acc-model sequential` (an exact FMA
  chain per output, bit-reproducible) is several times slower.
"""


def summary(res: ExperimentResult) -> list[str]:
    """One computed sentence per configuration and run: accuracy gap to FP32 and zero excess."""
    lines = []
    for r in res.rows:
        base = next((b for b in res.rows if b.config == r.config and b.run == "FP32"), None)
        if base is None or r is base:
            continue
        gap = 100 * (r.accuracy - base.accuracy)
        verdict = "within 1 point of FP32" if abs(gap) <= 1 else f"{gap:+.1f} points vs FP32"
        lines.append(
            f"`{r.config}`, {r.run}: {verdict}; {r.zero_pct - base.zero_pct:+.1f} points of "
            f"zero gradient values vs FP32 ({r.zero_pct_unscaled - base.zero_pct:+.1f} before "
            f"scaling); {r.skipped} skipped steps."
        )
    return lines
