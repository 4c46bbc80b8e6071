"""Validate fpemu against real frameworks (PyTorch CPU, Keras 3), and your own scaler's trace.

Everything here runs the framework and compares bit patterns; nothing is hard-coded from what a
framework "should" do. torch and keras are optional and imported only by the checks that need
them, so this package imports without them. One subpackage per concern:

* ``ops``: fpemu's emulation of each ATen op torch dispatches (one table, shared with
  ``fpemu.emulate``); ``watch``: ``fpemu.watch``, which judges every ATen op of your own
  training step against ``ops`` as it runs (the command line is ``fpemu validate step``);
  ``twin``: the side-by-side model twin (``compare_torch``, ``compare_keras``); ``frameworks``:
  the framework suites (``validate_torch``) and scaler-trace checks.

* :func:`validate_torch` runs every check and returns a :class:`Report` (rich table, JSON,
  markdown); the command line is ``fpemu validate torch``.
* ``compare_torch`` trains your own PyTorch model under ``watch`` and, in its independent
  mode, an emulated twin beside it (every op's value from the same op table), and reports
  the watch's findings and the drift between the two runs (``TwinReport``); the command
  line is ``fpemu validate model FILE.py:FACTORY``. ``from_torch`` converts a torch model
  into an ``fpemu.nn`` graph module.
  ``from_keras`` does the conversion for a Keras 3 ``Sequential`` model and
  ``compare_keras`` trains it side by side with Keras (torch backend, mixed policies,
  ``LossScaleOptimizer``), with the same report.
* :class:`ScalerRecorder` and :func:`check_trace` check a loss-scale trace you recorded against
  a framework's rules (torch, Keras 3, tf.keras, Apex, ...).

>>> rec = ScalerRecorder()
>>> rec.record(1024.0, found_inf=True)
>>> rec.record(512.0, found_inf=False)
>>> check_trace(rec, rules="torch").status
'agree'
"""

from fpemu.validate.frameworks.recorder import ScalerRecorder, TraceEntry, check_trace
from fpemu.validate.frameworks.report import STATUSES, CheckResult, Report
from fpemu.validate.frameworks.suite import SECTIONS, environment, validate_torch
from fpemu.validate.twin.compare import compare_torch
from fpemu.validate.twin.from_keras import from_keras
from fpemu.validate.twin.from_torch import from_torch
from fpemu.validate.twin.keras_compare import compare_keras
from fpemu.validate.twin.model_report import ModelReport, TensorCheck
from fpemu.validate.twin.twin_report import TwinReport


def __getattr__(name: str) -> object:
    """Lazy: ``watch`` imports torch only when first used."""
    if name == "watch":
        from fpemu.validate.watch import watch  # noqa: PLC0415

        return watch
    raise AttributeError(f"module 'fpemu.validate' has no attribute {name!r}")


__all__ = [
    "SECTIONS",
    "STATUSES",
    "CheckResult",
    "ModelReport",
    "Report",
    "ScalerRecorder",
    "TensorCheck",
    "TraceEntry",
    "TwinReport",
    "check_trace",
    "compare_keras",
    "compare_torch",
    "environment",
    "from_keras",
    "from_torch",
    "validate_torch",
    "watch",
]
