"""``fpemu validate``: run PyTorch beside fpemu and report.

``fpemu validate torch`` runs the framework checks on this machine's install;
``fpemu validate model FILE.py:FACTORY`` trains your own model under ``fpemu.watch`` beside its
emulated twin (:func:`fpemu.validate.compare_torch`; a Keras model: ``compare_keras``).
``FACTORY`` is a function in ``FILE.py`` that takes no arguments and returns
``(model, inputs, targets)`` or ``(model, inputs, targets, options)``,
``options`` being a dict of :func:`~fpemu.validate.compare_torch` keyword arguments (the
command-line flags given override it). ``FILE.py``'s folder is put first on ``sys.path``, as
``python FILE.py`` does, so modules beside it import.

Stdout holds one thing: the rich table, or the one report asked for without FILE (``--json``
alone: JSON that ``json.load`` reads). A report written to FILE is confirmed by one line on
stderr. Output folders, and the flags of the other subcommand, are refused before anything
runs; a factory that fails to import or raises, and torch refusing the model's data, are one
line too (``fpemu --debug validate ...`` shows the traceback).

Exit status: 0 when nothing differs (for ``model``: no op ``differs``, is ``policy`` or
``not_emulated`` and no procedure finding; the twin's drift is information, not a finding), 1
when something does, 2 for bad arguments or when torch is not installed.

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
import sys
from pathlib import Path
from typing import Any

from fpemu.cli import output
from fpemu.cli.errors import UsageError
from fpemu.cli.html_out import add_html_option, check_html_path, write_html
from fpemu.cli.userfile import call_function, load_function, one_line
from fpemu.validate.frameworks.suite import SECTIONS

TORCH_HINT = (
    "fpemu validate needs PyTorch: pip install 'torch==2.13.0' --index-url "
    "https://download.pytorch.org/whl/cpu (the default PyPI wheel is a CUDA build of several GB)"
)
AUTOCAST = ("bf16", "fp16", "off")
SCALER_INT = ("growth_interval",)
SCALER_FLOAT = ("init_scale", "growth_factor", "backoff_factor")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``validate`` arguments to ``parser``."""
    parser.add_argument("framework", choices=["torch", "model", "step"],
                        help="torch: check fpemu against PyTorch CPU (plus Keras 3 when "
                             "installed); model: train FILE.py:FACTORY's model under "
                             "fpemu.watch beside its emulated twin; step: judge every "
                             "ATen op of FILE.py:FUNC's training step (fpemu.watch)")  # fmt: skip
    parser.add_argument("target", nargs="?", metavar="FILE.py:FACTORY",
                        help="(model) a file and a function returning (model, inputs, targets"
                             "[, options]); (step) a file and a function that sets up and "
                             "returns the step function, called --steps times")  # fmt: skip
    parser.add_argument("--policy", default=None, metavar="PRESET",
                        help="(step) an fpemu policy whose formats the program may use "
                             "outside autocast (default: the program's own autocast)")  # fmt: skip
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
    parser.add_argument("--steps", type=int, default=None,
                        help="(model, step) training steps (3)")  # fmt: skip
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
                        help="(model) only torch's run, every op judged from torch's own "
                             "inputs (fpemu.watch), no emulated twin and no drift")  # fmt: skip


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
    """Import ``FILE.py`` and return its ``FACTORY`` function (:func:`load_function`).

    Raises:
        UsageError: (a ValueError) not ``FILE.py:FACTORY``, a missing file, or no such function.
    """
    return load_function(target, label="FILE.py:FACTORY", example="mymodel.py:make")


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before anything runs, two reports on stdout and a file in a missing folder.

    Raises:
        UsageError: ``--json`` and ``--markdown`` both without FILE (stdout holds one format),
            or a FILE whose folder does not exist.
    """
    if str(args.json) == "-" and str(args.markdown) == "-":
        raise UsageError("--json --markdown: only one report on stdout; give one of them a "
                         "FILE (--markdown report.md)")  # fmt: skip
    output.writable("--json", args.json)
    output.writable("--markdown", args.markdown)


def check_flags(args: argparse.Namespace) -> None:
    """Refuse the flags of the other framework (each is only read by one).

    Raises:
        UsageError: a ``(torch)`` flag with ``model`` or a ``(model)`` flag with ``torch``.
    """
    mine = args.framework
    for flag, dest, owners in _FLAGS:
        value = getattr(args, dest)
        owner = owners.split()[0]
        if mine not in owners.split() and value not in (None, False):
            shown = f"{flag} {value}" if not isinstance(value, bool) else flag
            if isinstance(value, list):
                shown = f"{flag} {' '.join(value)}"
            raise UsageError(f"{shown}: only for 'fpemu validate {owner}'; fpemu validate "
                             f"{mine} --help lists its options")  # fmt: skip


#: (flag, dest, the subcommands that read it)
_FLAGS = (("--quick", "quick", "torch"), ("--exhaustive", "exhaustive", "torch"),
          ("--only", "only", "torch"), ("--steps", "steps", "model step"),
          ("--autocast", "autocast", "model"), ("--scaler", "scaler", "model"),
          ("--optimizer", "optimizer", "model"), ("--lr", "lr", "model"),
          ("--lockstep", "lockstep", "model"), ("--policy", "policy", "step"))  # fmt: skip


def _write(text: str, where: Path, what: str) -> None:
    if str(where) == "-":
        print(text)
    else:
        where.write_text(text + "\n")
        print(f"fpemu validate: wrote the {what} report to {where}", file=sys.stderr)


def emit(report: Any, args: argparse.Namespace, **render: Any) -> None:
    """The report on stdout (the rich table, or the one format asked for without FILE) and
    the files asked for (one line on stderr each)."""
    if "-" not in (str(args.json), str(args.markdown)):
        report.render(output.console(), **render)
    if args.json is not None:
        _write(report.to_json(), args.json, "JSON")
    if args.markdown is not None:
        _write(report.to_markdown(), args.markdown, "markdown")


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
    made = call_function(load_factory(args.target), label="FILE.py:FACTORY", target=args.target)
    if not isinstance(made, tuple) or len(made) not in (3, 4):
        raise UsageError(f"FILE.py:FACTORY {args.target}: the function returned "
                         f"{type(made).__name__}; accepted (model, inputs, targets"
                         "[, options])")  # fmt: skip
    options = made[3] if len(made) == 4 else {}
    try:
        if type(made[0]).__module__.split(".")[0] == "keras":
            report = _keras_report(args, made[:3], options)
        else:
            report = compare_torch(*made[:3], **_model_options(args, options))
    except RuntimeError as exc:  # torch refused the model's inputs (shapes, dtypes, ...)
        raise UsageError(f"FILE.py:FACTORY {args.target}: the framework refused the model or "
                         f"its data: {one_line(exc)} (fpemu --debug validate ... shows "
                         "where)") from exc  # fmt: skip
    emit(report, args, only_differences=True)
    write_html(args.html, report)
    return 0 if report.ok else 1


def run_step(args: argparse.Namespace) -> int:
    """``fpemu validate step FILE.py:FUNC``: ``FUNC()`` sets up (model, optimizer, data) and
    returns the step function; the step runs ``--steps`` times under ``fpemu.watch``."""
    from fpemu.amp.policy import preset_names  # noqa: PLC0415
    from fpemu.validate.watch import watch  # noqa: PLC0415

    if not args.target:
        raise UsageError(
            "FILE.py:FUNC (missing): accepted a Python file and a function "
            "returning the step function, e.g. fpemu validate step t.py:setup"
        )
    steps = 3 if args.steps is None else args.steps
    if steps < 1:
        raise UsageError(f"--steps {steps}: accepted an int >= 1")
    if args.policy is not None and args.policy not in preset_names():
        raise UsageError(f"--policy {args.policy}: accepted {', '.join(preset_names())}")
    step = call_function(load_factory(args.target), label="FILE.py:FUNC", target=args.target)
    if not callable(step):
        raise UsageError(f"FILE.py:FUNC {args.target}: returned {type(step).__name__}; "
                         "accepted the step function (a callable taking no arguments)")  # fmt: skip

    def watched() -> Any:
        with watch(policy=args.policy) as w:
            for _ in range(steps):
                step()
        return w.report()

    report = call_function(watched, label="FILE.py:FUNC", target=args.target, what="the step")
    emit(report, args)
    write_html(args.html, report)
    return 0 if report.ok else 1


def run(args: argparse.Namespace) -> int:
    """Run the checks; print the table; write the files asked for; return the exit status."""
    if args.target is not None and args.framework == "torch":
        raise UsageError(f"FILE.py:FACTORY {args.target}: only 'fpemu validate model' and "
                         "'fpemu validate step' take one")  # fmt: skip
    check_flags(args)  # bad invocations first: the same answer with or without torch
    check_outputs(args)
    check_html_path(args.html)
    try:
        import torch  # noqa: F401, PLC0415
    except ImportError:
        print(TORCH_HINT, file=sys.stderr)
        return 2
    if args.framework == "model":
        return run_model(args)
    if args.framework == "step":
        return run_step(args)
    from fpemu.validate.frameworks.suite import validate_torch  # noqa: PLC0415

    report = validate_torch(
        sections=args.only or SECTIONS,
        n_random=2**16 if args.quick else 2**20,
        exhaustive=args.exhaustive,
        progress=True,
        training_steps=20 if args.quick else 60,
    )
    emit(report, args)
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
