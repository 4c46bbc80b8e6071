"""The model twin: your model trained in the framework and in fpemu side by side.

``compare_torch`` and ``compare_keras`` build fpemu's twin of the model (``from_torch``,
``from_keras``), train both from the same weights and batches, compare every tensor of every
step and explain each difference (``checker``, ``causes``), as two independent runs or in
lockstep; the result is a ``ModelReport``.
"""

from fpemu.validate.twin.compare import compare_torch
from fpemu.validate.twin.from_keras import from_keras
from fpemu.validate.twin.from_torch import from_torch
from fpemu.validate.twin.keras_compare import compare_keras
from fpemu.validate.twin.model_report import ModelReport, TensorCheck

__all__ = ["ModelReport", "TensorCheck", "compare_keras", "compare_torch", "from_keras",
           "from_torch"]  # fmt: skip
