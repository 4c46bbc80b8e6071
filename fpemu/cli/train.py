"""``fpemu train``: train a small MLP under a mixed-precision policy and print what happened.

By default it trains the ``spirals`` data set under PyTorch's CUDA FP16 autocast policy with
torch's dynamic ``GradScaler`` (``--policy fp32`` for plain FP32), and prints the accuracy, the
loss-scale trace (scale at the first and last step, skipped steps, growths and backoffs) and the
gradient values per layer that are zero, subnormal or overflowed in the gradient format.

>>> from fpemu.cli import main
>>> main(["train", "moons", "--steps", "2", "--hidden", "4", "--json"])  # doctest: +ELLIPSIS
{...
0
"""

from __future__ import annotations

import argparse
import itertools
import math
import textwrap
from collections.abc import Sequence

import numpy as np

from fpemu.amp.policy import POLICY_ALIASES, get_policy, preset_names
from fpemu.amp.recipes import RECIPES
from fpemu.amp.scaling.registry import SCALER_ALIASES, SCALERS, get_scaler
from fpemu.cli import output
from fpemu.cli.args import accepted, int_at_least, model_names, name_of, number
from fpemu.cli.errors import UsageError
from fpemu.cli.explain import plain_table
from fpemu.linalg import get_model
from fpemu.nn.fp8 import supported
from fpemu.training import TrainResult, train
from fpemu.training.datasets import DATASETS, get_dataset, unavailable

#: Scaler names ``--scaler`` takes besides the registry's.
_SPECIAL_SCALERS = ("policy", "none")
#: Accumulation models listed in messages (instruction models are many: see fpemu.linalg.models).
_MODELS = [*model_names(), "sm90.mma.f16.f32, ..."]
#: The policy without --policy and --recipe.
DEFAULT_POLICY = "torch_cuda_fp16"
#: Scale-change events printed without ``--trace``.
EVENTS_SHOWN = 10


def _scaler(name: str) -> object:
    return name if name in _SPECIAL_SCALERS else get_scaler(name)


#: Recipes ``--recipe`` runs: every recipe the FP8 layer supports (:func:`fpemu.nn.fp8.supported`).
_RECIPES = [n for n in RECIPES if supported(n)]


def _fp8_recipe(name: str) -> object:
    if name not in _RECIPES:
        raise ValueError(name)
    return RECIPES[name]


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpemu train``."""
    policies = [*preset_names(), *POLICY_ALIASES]
    scalers = list(dict.fromkeys([*_SPECIAL_SCALERS, *SCALERS, *SCALER_ALIASES]))
    parser.add_argument("dataset", nargs="?", default="spirals", metavar="DATASET",
                        type=name_of("data set", get_dataset_name, DATASETS),
                        help=f"data set: {accepted(DATASETS)} (all ship with fpemu"
                             f"{_needs_note()}) (default: spirals)")  # fmt: skip
    parser.add_argument("--policy", default=None, type=name_of("policy", get_policy, policies),
                        help=f"AMP policy preset: {accepted(policies)} (default: "
                             f"{DEFAULT_POLICY}; fp32, the only one, with --recipe)")  # fmt: skip
    parser.add_argument("--scaler", default=None, type=name_of("scaler", _scaler, scalers),
                        help="loss scaler: 'policy' (the one the policy's framework pairs with "
                             f"it), 'none', or {accepted(scalers[2:])} (default: policy; "
                             "none with --recipe, which takes no other)")  # fmt: skip
    parser.add_argument("--hidden", type=int_at_least(1), nargs="+", default=[64],
                        metavar="WIDTH", help="hidden layer widths")  # fmt: skip
    parser.add_argument("--steps", type=int_at_least(1), default=200, help="optimizer steps")
    parser.add_argument("--lr", type=number(positive=True), default=0.05, help="learning rate")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                        help="sgd (momentum 0.9) or adam")  # fmt: skip
    parser.add_argument("--batch-size", type=int_at_least(1), default=64,
                        help="examples per step")  # fmt: skip
    parser.add_argument("--micro-batches", type=int_at_least(1), default=1,
                        help="gradient accumulation: micro-batches per step (divides "
                             "--batch-size)")  # fmt: skip
    parser.add_argument(
        "--clip",
        type=number(positive=True),
        default=None,
        help="clip the unscaled gradients' global norm to this value",
    )
    parser.add_argument(
        "--loss-weight",
        type=number(positive=True),
        default=1.0,
        help="multiply the loss (a small weight makes FP16 gradients underflow)",
    )
    parser.add_argument("--acc-model", default=None, metavar="MODEL",
                        type=name_of("accumulation model", get_model, _MODELS),
                        help="override the policy's matmul accumulation model: "
                             f"{accepted(model_names())} or an "
                             "instruction model (sm90.mma.f16.f32, ...)")  # fmt: skip
    parser.add_argument("--recipe", default=None, type=name_of("recipe", _fp8_recipe, _RECIPES),
                        help="train with FP8 linear layers under this recipe (the ops between "
                             f"them in FP32: policy fp32): {accepted(_RECIPES)}")  # fmt: skip
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="seed of initialisation, split and batches")  # fmt: skip
    parser.add_argument("--trace", action="store_true",
                        help="print every step where the scale changed or the step was skipped "
                             f"(otherwise the first {EVENTS_SHOWN})")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-progress", action="store_true",
                        help="hide the progress bar (shown only on a terminal)")  # fmt: skip


def _needs_note() -> str:
    """``; digits needs the data extra`` for each data set of NEEDS (none today)."""
    from fpemu.training.datasets import NEEDS  # noqa: PLC0415

    return "".join(f"; {n} needs pip install 'fpemu[{extra}]'" for n, (_, extra, _) in
                   NEEDS.items())  # fmt: skip


def get_dataset_name(name: str) -> str:
    """``name`` if it is a data set of :data:`~fpemu.training.datasets.DATASETS`."""
    if name not in DATASETS:
        raise ValueError(name)
    return name


def run(args: argparse.Namespace) -> int:
    """Run ``fpemu train``; returns the exit status.

    Raises:
        UsageError: the data set needs a missing extra, or ``--batch-size`` is not a multiple
            of ``--micro-batches`` or larger than the training set.
    """
    missing = unavailable(args.dataset)
    if missing:
        raise UsageError(f"DATASET {args.dataset}: {missing}")
    if args.batch_size % args.micro_batches:
        raise UsageError(f"--micro-batches {args.micro_batches}: must divide --batch-size "
                         f"{args.batch_size}")  # fmt: skip
    n_train = len(get_dataset(args.dataset, seed=args.seed).x_train)
    if args.batch_size > n_train:
        raise UsageError(f"--batch-size {args.batch_size}: at most {n_train}, the training "
                         f"examples of {args.dataset}")  # fmt: skip
    policy = DEFAULT_POLICY if args.policy is None else args.policy
    scaler_name = "policy" if args.scaler is None else args.scaler
    if args.recipe is not None:  # FP8 layers between FP32 ops: policy fp32, no loss scaler
        if args.policy is not None and get_policy(args.policy).name != "fp32":
            raise UsageError(f"--policy {args.policy}: not with --recipe {args.recipe} "
                             "(--recipe runs under fp32: FP32 ops between the FP8 layers; "
                             "leave --policy out)")  # fmt: skip
        if scaler_name not in ("policy", "none", "off"):
            raise UsageError(f"--scaler {args.scaler}: not with --recipe {args.recipe} (the "
                             "recipe scales each FP8 tensor; no loss scaler)")  # fmt: skip
        policy = "fp32"
    scaler = None if scaler_name in ("none", "off") else scaler_name
    r = train(args.dataset, hidden=tuple(args.hidden), policy=policy, scaler=scaler,
              steps=args.steps, lr=args.lr, optimizer=args.optimizer, seed=args.seed,
              batch_size=args.batch_size, micro_batches=args.micro_batches, clip=args.clip,
              loss_weight=args.loss_weight, acc_model=args.acc_model,
              progress=not args.no_progress, recipe=args.recipe)  # fmt: skip
    if args.json:
        print(r.to_json(indent=2))
        return 0
    print("\n".join(report(r, trace=args.trace, width=output.width() or 80)))
    return 0


def scale_events(r: TrainResult) -> list[tuple[int, float, float, str]]:
    """Steps where the loss scale changed or the step was skipped: (step, loss, scale, what).

    >>> from fpemu.training import TrainResult, TrainStep
    >>> r = TrainResult(config={}, steps=[TrainStep(0, 1.0, 4.0, True, True),
    ...                                   TrainStep(1, 1.0, 2.0, False, False)])
    >>> scale_events(r)
    [(0, 1.0, 4.0, 'skipped (inf/NaN gradients)'), (1, 1.0, 2.0, 'backoff: 4 -> 2')]
    """
    out = []
    prev = None
    for s in r.steps:
        what = []
        if prev is not None and s.scale != prev:
            what.append(f"{'growth' if s.scale > prev else 'backoff'}: {prev:g} -> {s.scale:g}")
        if s.skipped:
            what.append("skipped (inf/NaN gradients)")
        if what:
            out.append((s.step, s.loss, s.scale, "; ".join(what)))
        prev = s.scale
    return out


def report(r: TrainResult, *, trace: bool = False, width: int = 80) -> list[str]:
    """The printed lines: run, accuracy, loss-scale summary and trace, gradient table; the
    text is wrapped at ``width`` columns and the tables fit 80."""
    c = r.config
    pol = get_policy(c["policy"])
    scales = [s.scale for s in r.steps]
    growths = sum(b > a for a, b in itertools.pairwise(scales))
    backoffs = sum(b < a for a, b in itertools.pairwise(scales))

    def para(text: str) -> list[str]:
        return textwrap.wrap(text, width=width, break_on_hyphens=False)

    lines = [
        *para(f"{c['dataset']}: MLP with hidden widths {', '.join(map(str, c['hidden']))}, "
              f"policy {c['policy']} (compute {pol.compute.name}, parameters {pol.param.name}, "
              f"master weights {pol.master.name if pol.master else 'none'}), "
              f"scaler {c['scaler']}, {c['optimizer']} lr {c['lr']:g}, {len(r.steps)} steps"),
        *para(f"accuracy: test {100 * r.final_accuracy:.1f}%, train "
              f"{100 * r.train_accuracy:.1f}%; final loss {r.final_loss:.4g}"),
        *para(f"loss scale: {scales[0]:g} at the first step, {scales[-1]:g} at the last; "
              f"{r.skipped_steps} skipped steps, {growths} growths, {backoffs} backoffs"),
    ]  # fmt: skip
    events = scale_events(r)
    if events:
        shown = events if trace else events[:EVENTS_SHOWN]
        lines += ["", plain_table(("step", "loss", "scale used", "event"),
                                  [(str(s), f"{loss:.4g}", f"{sc:g}",
                                    what.replace("skipped (inf/NaN gradients)", "skipped"))
                                   for s, loss, sc, what in shown])]  # fmt: skip
        lines += para("skipped: the gradients held inf or NaN; the step was not applied")
        if len(shown) < len(events):
            lines.append(f"... {len(events) - len(shown)} more events (--trace shows all)")
    lines += ["", *para(f"gradient values as {pol.compute.name}, % per layer (mean over "
                        "steps): after = with the loss scale, as backward produced them; "
                        "before = without")]  # fmt: skip
    rows = []
    for layer, st in r.grad_stats.items():
        a, b = st["after_scaling"], st["before_scaling"]
        rows.append((layer, *(f"{100 * d[k]:.2f}" for d in (a, b)
                              for k in ("zero", "subnormal", "overflow"))))  # fmt: skip
    header: Sequence[str] = ("layer", *(("zero", "subnormal", "overflow") * 2))
    table = plain_table(header, rows)
    head = table.splitlines()[0]
    after = head.index("zero")
    before = head.index("zero", after + 1)
    lines += [f"{'':{after}}{'after':{before - after}}before", table]
    if r.fp8_trace:
        lines += ["", f"FP8 recipe {c['recipe']}: % of elements per step (mean), last scale"]
        rows = [(layer, role, *(f"{100 * np.mean([t[role][k] for t in recs]):.3f}"
                                for k in ("saturated", "flushed", "subnormal")),
                 _scale(recs[-1][role]["scale"]))
                for layer, recs in r.fp8_trace.items() for role in recs[-1]]  # fmt: skip
        lines.append(plain_table(("layer", "role", "saturated", "flushed", "subnormal",
                                  "scale"), rows))  # fmt: skip
        if any(row[-1] == "-" for row in rows):
            lines += para(
                f"scale -: {c['recipe']} scales blocks of elements, one scale "
                "per block: no single scale to show"
            )
    return lines


def _scale(value: float | str) -> str:
    """A recipe's last per-tensor scale; ``-`` for a block-scaled recipe (no tensor scale: the
    trace holds NaN, as a float or as JSON's string)."""
    v = float(value)
    return f"{v:g}" if math.isfinite(v) else "-"
