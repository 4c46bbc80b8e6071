"""Validate fpemu against real frameworks (PyTorch CPU, Keras 3), and your own scaler's trace.

Everything here runs the framework and compares bit patterns; nothing is hard-coded from what a
framework "should" do. torch and keras are optional and imported only by the checks that need
them, so this package imports without them.

* :func:`validate_torch` runs every check and returns a :class:`Report` (rich table, JSON,
  markdown); the command line is ``fpemu validate torch``.
* ``from_torch`` brings your own PyTorch model into fpemu and ``compare_torch`` trains
  it side by side with torch, comparing every tensor of every step bit for bit
  (``ModelReport``), either as two independent runs or in lockstep (every op of every step
  from torch's own inputs: ``fpemu.validate.lockstep``); the command line is
  ``fpemu validate model FILE.py:FACTORY``.
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

from fpemu.validate.compare import compare_torch
from fpemu.validate.from_keras import from_keras
from fpemu.validate.from_torch import from_torch
from fpemu.validate.keras_compare import compare_keras
from fpemu.validate.model_report import ModelReport, TensorCheck
from fpemu.validate.recorder import ScalerRecorder, TraceEntry, check_trace
from fpemu.validate.report import STATUSES, CheckResult, Report
from fpemu.validate.suite import SECTIONS, environment, validate_torch

__all__ = [
    "SECTIONS",
    "STATUSES",
    "CheckResult",
    "ModelReport",
    "Report",
    "ScalerRecorder",
    "TensorCheck",
    "TraceEntry",
    "check_trace",
    "compare_keras",
    "compare_torch",
    "environment",
    "from_keras",
    "from_torch",
    "validate_torch",
]
