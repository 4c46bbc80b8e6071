"""Run every framework check and gather the results in one :class:`~fpemu.validate.Report`.

>>> SECTIONS
('casts', 'autocast', 'scaler', 'training', 'keras')
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from fpemu.validate.frameworks.report import CheckResult, Report

#: The check families, in the order they run.
SECTIONS: tuple[str, ...] = ("casts", "autocast", "scaler", "training", "keras")


def environment() -> dict[str, str]:
    """Versions of everything the checks depend on (missing packages say so)."""
    import fpemu  # noqa: PLC0415

    env = {"fpemu": fpemu.__version__, "python": sys.version.split()[0],
           "numpy": np.__version__, "platform": platform.platform()}  # fmt: skip
    for mod in ("torch", "keras"):
        try:
            m = __import__(mod) if mod != "keras" else _keras()
            env[mod] = str(m.__version__)
        except Exception as exc:  # not installed, or keras with another backend
            env[mod] = f"unavailable ({type(exc).__name__}: {exc})"
    try:
        import torch  # noqa: PLC0415

        env["torch threads"] = str(torch.get_num_threads())
        env["torch CPU capability"] = str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # torch missing: already reported above
        pass
    return env


def _keras() -> Any:
    from fpemu.validate.frameworks.keras_checks import import_keras  # noqa: PLC0415

    return import_keras()


def validate_torch(
    *,
    sections: Sequence[str] = SECTIONS,
    n_random: int = 2**20,
    exhaustive: bool = False,
    progress: bool = False,
    training_steps: int = 60,
) -> Report:
    """Run the checks of ``sections`` against the installed torch (and Keras) and report.

    Args:
        sections: any of :data:`SECTIONS`.
        n_random: random float32 bit patterns per cast target.
        exhaustive: also cast all 2**32 float32 patterns to bfloat16 and float16 (minutes).
        progress: show progress bars (exhaustive casts).
        training_steps: steps of each side-by-side training run.

    Raises:
        ValueError: an unknown section.
        ImportError: torch is not installed.
    """
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        raise ValueError(f"unknown sections {bad}; accepted: {', '.join(SECTIONS)}")
    import torch  # noqa: F401, PLC0415 - fail early and clearly without torch

    report = Report(title="fpemu vs PyTorch (CPU) and Keras 3", environment=environment())
    for section in sections:
        report.extend(_run_section(section, n_random=n_random, exhaustive=exhaustive,
                                   progress=progress, training_steps=training_steps))  # fmt: skip
    return report


def _run_section(section: str, *, n_random: int, exhaustive: bool, progress: bool,
                 training_steps: int) -> list[CheckResult]:  # fmt: skip
    # Imported per section so that one broken fpemu module cannot hide the others' results.
    if section == "casts":
        from fpemu.validate.frameworks.torch_casts import check_casts, exhaustive_float32  # noqa: PLC0415

        out = check_casts(n_random=n_random)
        if exhaustive:
            out += [exhaustive_float32(f, progress=progress) for f in ("bfloat16", "float16")]
        return out
    if section == "autocast":
        from fpemu.validate.frameworks.torch_autocast import check_autocast  # noqa: PLC0415

        return check_autocast()
    if section == "scaler":
        from fpemu.validate.frameworks.torch_scaler import check_grad_scaler  # noqa: PLC0415

        return check_grad_scaler()
    if section == "training":
        from fpemu.validate.frameworks.torch_training import check_sgd_update, check_training  # noqa: PLC0415

        return [*check_training(steps=training_steps), check_sgd_update()]
    from fpemu.validate.frameworks.keras_checks import check_keras_scaler  # noqa: PLC0415

    return check_keras_scaler()
