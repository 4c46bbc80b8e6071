"""The framework suites: fpemu checked against this machine's PyTorch and Keras install.

``validate_torch`` runs the sections (casts, autocast op dtypes, GradScaler and Keras scaler
rules, training steps) into a ``Report``; ``ScalerRecorder`` and ``check_trace`` check a
loss-scale trace you recorded against a framework's rules.
"""

from fpemu.validate.frameworks.recorder import ScalerRecorder, TraceEntry, check_trace
from fpemu.validate.frameworks.report import STATUSES, CheckResult, Report
from fpemu.validate.frameworks.suite import SECTIONS, environment, validate_torch

__all__ = ["SECTIONS", "STATUSES", "CheckResult", "Report", "ScalerRecorder", "TraceEntry",
           "check_trace", "environment", "validate_torch"]  # fmt: skip
