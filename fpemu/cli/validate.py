"""``fpemu validate``: run PyTorch beside fpemu and report.

``fpemu validate torch`` runs the framework checks on this machine's install;
``fpemu validate model FILE.py:FACTORY`` trains your own model side by side
(:func:`fpemu.validate.compare_torch`). ``FACTORY`` is a function in ``FILE.py`` that takes no
arguments and returns ``(model, inputs, targets)`` or ``(model, inputs, targets, options)``,
``options`` being a dict of :func:`~fpemu.validate.compare_torch` keyword arguments (the
command-line flags given override it).

Exit status: 0 when nothing differs (every difference explained, for ``model``), 1 when
something does, 2 for bad arguments or when torch is not installed.

>>> import argparse
>>> p = argparse.ArgumentParser(prog="fpemu validate")
>>> configure(p)
>>> a = p.parse_args(["torch", "--quick", "--only", "casts"])
>>> a.framework, a.quick, a.only
('torch', True, ['casts'])
>>> a = p.parse_args(["model", "net.py:make", "--steps", "2", "--autocast", "fp16", "--json"])
>>> a.target, a.steps, a.autocast, str(a.json)
('net.py:make', 2, 'fp16', '-')
>>> scaler_option("init_scale=1024,growth_interval=2")
{'init_scale': 1024.0, 'growth_interval': 2}
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from fpemu.cli.errors import UsageError
from fpemu.cli.html_out import add_html_option, check_html_path, write_html
from fpemu.validate.suite import SECTIONS

TORCH_HINT = (
    "fpemu validate needs PyTorch: pip install 'torch==2.13.0' --index-url "
    "https://download.pytorch.org/whl/cpu (the default PyPI wheel is a CUDA build of several GB)"
)
AUTOCAST = ("bf16", "fp16", "off")
SCALER_INT = ("growth_interval",)
SCALER_FLOAT = ("init_scale", "growth_factor", "backoff_factor")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``validate`` arguments to ``parser``."""
    parser.add_argument("framework", choices=["torch", "model"],
                        help="torch: check fpemu against PyTorch CPU (plus Keras 3 when "
                             "installed); model: train FILE.py:FACTORY's model side by "
                             "side")  # fmt: skip
    parser.add_argument("target", nargs="?", metavar="FILE.py:FACTORY",
                        help="(model) a file and a function returning (model, inputs, targets"
                             "[, options])")  # fmt: skip
    parser.add_argument("--json", metavar="FILE", type=Path, nargs="?", const=Path("-"),
                        help="write the report as JSON (to stdout without FILE)")  # fmt: skip
    parser.add_argument("--markdown", metavar="FILE", type=Path, nargs="?", const=Path("-"),
                        help="write the report as markdown (to stdout without FILE)")  # fmt: skip
    add_html_option(parser)
    parser.add_argument(
        "--exhaustive",
        action="store_true",
        help="(torch) also cast all 2**32 float32 patterns to bf16 and fp16",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="(torch) smaller samples (2**16 random patterns, 20 training steps)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        metavar="SECTION",
        help=f"(torch) run only these sections: {', '.join(SECTIONS)}",
    )
    parser.add_argument("--steps", type=int, default=None, help="(model) training steps (3)")
    parser.add_argument("--autocast", default=None, metavar="|".join(AUTOCAST),
                        help="(model) CPU autocast dtype, or off (bf16)")  # fmt: skip
    parser.add_argument("--scaler", default=None, metavar="off|default|KEY=VALUE,...",
                        help="(model) GradScaler: off, torch's defaults, or options such as "
                             "init_scale=1024,growth_interval=2 (default: default for fp16, "
                             "off otherwise)")  # fmt: skip
    parser.add_argument(
        "--optimizer", default=None, metavar="sgd|adam|adamw", help="(model) optimizer (sgd)"
    )
    parser.add_argument("--lr", type=float, default=None, help="(model) learning rate (0.01)")
    parser.add_argument("--lockstep", action="store_true",
                        help="(model) every op of every step from torch's own inputs and state "
                             "(each difference local; about half the time) instead of two "
                             "independent runs")  # fmt: skip


def scaler_option(text: str) -> dict[str, Any] | None:
    """Parse ``--scaler``: ``off`` (None), ``default`` ({}), or ``KEY=VALUE,...``.

    Raises:
        UsageError: (a ValueError) an unknown key or a value that is not a number.
    """
    if text == "off":
        return None
    if text == "default":
        return {}
    out: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or key not in SCALER_INT + SCALER_FLOAT:
            raise UsageError(f"--scaler {text}: accepted off, default, or KEY=VALUE pairs "
                             f"with KEY in {', '.join(SCALER_FLOAT + SCALER_INT)}")  # fmt: skip
        try:
            out[key] = int(value) if key in SCALER_INT else float(value)
        except ValueError:
            raise UsageError(f"--scaler {text}: {key} needs a number, got {value!r}") from None
    return out


def load_factory(target: str) -> Any:
    """Import ``FILE.py`` and return its ``FACTORY`` function.

    Raises:
        UsageError: (a ValueError) not ``FILE.py:FACTORY``, a missing file, or no such function.
    """
    path, colon, name = target.rpartition(":")
    if not colon or not path.endswith(".py") or not name.isidentifier():
        raise UsageError(f"FILE.py:FACTORY {target}: accepted a Python file and a function "
                         "name, e.g. mymodel.py:make")  # fmt: skip
    if not Path(path).is_file():
        raise UsageError(f"FILE.py:FACTORY {target}: no file {path}")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise UsageError(f"FILE.py:FACTORY {target}: {path} has no function {name}")
    return factory


def _write(text: str, where: Path) -> None:
    if str(where) == "-":
        print(text)
    else:
        where.write_text(text + "\n")


def _training_options(args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """The factory's options with ``--steps`` (default 3), ``--optimizer`` and ``--lr`` over
    them: the flags both ``compare_torch`` and ``compare_keras`` take."""
    kw = dict(options)
    if args.steps is not None:
        if args.steps < 1:
            raise UsageError(f"--steps {args.steps}: accepted an int >= 1")
        kw["steps"] = args.steps
    kw.setdefault("steps", 3)
    if args.optimizer is not None:
        if args.optimizer not in ("sgd", "adam", "adamw"):
            raise UsageError(f"--optimizer {args.optimizer}: accepted sgd, adam, adamw")
        kw["optimizer"] = args.optimizer
    if args.lr is not None:
        kw["lr"] = args.lr
    return kw


def _model_options(args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    import torch  # noqa: PLC0415 - optional dependency

    kw = _training_options(args, options)
    if args.autocast is not None:
        if args.autocast not in AUTOCAST:
            raise UsageError(f"--autocast {args.autocast}: accepted {', '.join(AUTOCAST)}")
        kw["autocast"] = None if args.autocast == "off" else (
            "cpu", torch.bfloat16 if args.autocast == "bf16" else torch.float16)  # fmt: skip
    kw.setdefault("autocast", ("cpu", torch.bfloat16))
    low = kw["autocast"][1] if kw["autocast"] is not None else None
    if args.scaler is not None:
        kw["grad_scaler"] = scaler_option(args.scaler)
    kw.setdefault("grad_scaler", {} if low in (torch.float16, "fp16", "float16") else None)
    if args.lockstep:
        kw["mode"] = "lockstep"
    return kw


def _keras_report(args: argparse.Namespace, made: tuple[Any, ...],
                  options: dict[str, Any]) -> Any:  # fmt: skip
    """``compare_keras`` for a factory returning a Keras model: its dtype policy sets the
    precision, so the torch-only flags are refused."""
    from fpemu.validate import compare_keras  # noqa: PLC0415

    for flag, given in (
        ("--autocast", args.autocast is not None),
        ("--scaler", args.scaler is not None),
        ("--lockstep", args.lockstep),
    ):
        if given:
            raise UsageError(f"{flag}: not for a Keras model (its dtype policy sets the "
                             "precision and Keras's LossScaleOptimizer the scaling); accepted "
                             "--steps, --optimizer, --lr")  # fmt: skip
    return compare_keras(*made, **_training_options(args, options))


def run_model(args: argparse.Namespace) -> int:
    """``fpemu validate model FILE.py:FACTORY``."""
    from fpemu.validate import compare_torch  # noqa: PLC0415

    if not args.target:
        raise UsageError("FILE.py:FACTORY (missing): accepted a Python file and a function "
                         "name, e.g. fpemu validate model mymodel.py:make")  # fmt: skip
    made = load_factory(args.target)()
    if not isinstance(made, tuple) or len(made) not in (3, 4):
        raise UsageError(f"FILE.py:FACTORY {args.target}: the function returned "
                         f"{type(made).__name__}; accepted (model, inputs, targets"
                         "[, options])")  # fmt: skip
    options = made[3] if len(made) == 4 else {}
    if type(made[0]).__module__.split(".")[0] == "keras":
        report = _keras_report(args, made[:3], options)
    else:
        report = compare_torch(*made[:3], **_model_options(args, options))
    if args.json is None and args.markdown is None:
        report.render(only_differences=True)
    if args.json is not None:
        _write(report.to_json(), args.json)
    if args.markdown is not None:
        _write(report.to_markdown(), args.markdown)
    write_html(args.html, report)
    return 0 if report.ok else 1


def run(args: argparse.Namespace) -> int:
    """Run the checks; print the table; write the files asked for; return the exit status."""
    check_html_path(args.html)
    try:
        import torch  # noqa: F401, PLC0415
    except ImportError:
        print(TORCH_HINT, file=sys.stderr)
        return 2
    if args.framework == "model":
        return run_model(args)
    if args.target is not None:
        raise UsageError(f"FILE.py:FACTORY {args.target}: only 'fpemu validate model' takes one")
    from fpemu.validate.suite import validate_torch  # noqa: PLC0415

    report = validate_torch(
        sections=args.only or SECTIONS,
        n_random=2**16 if args.quick else 2**20,
        exhaustive=args.exhaustive,
        progress=True,
        training_steps=20 if args.quick else 60,
    )
    report.render()
    if args.json:
        _write(report.to_json(), args.json)
    if args.markdown:
        _write(report.to_markdown(), args.markdown)
    write_html(args.html, report)
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m fpemu.cli.validate torch``."""
    parser = argparse.ArgumentParser(prog="fpemu validate", description=__doc__)
    configure(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValueError as exc:  # fpemu.cli.main prints these as one line too
        print(f"fpemu validate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
