"""The model twin: your model trained in the framework and in fpemu side by side.

``compare_torch`` trains a deep copy of a torch model under ``fpemu.watch`` (every ATen op
judged from torch's inputs) and, in its independent mode, a second copy inside
``fpemu.emulate.as_torch.as_torch_cpu`` (every op's value from fpemu's op table), and reports
the watch's findings and the drift between the runs (``TwinReport``). ``compare_keras`` builds
fpemu's own twin of a Keras model (``from_keras``), trains both from the same weights and
batches and explains every difference (``checker``, ``causes``; a ``ModelReport``).
``from_torch`` converts a torch model into an ``fpemu.nn`` graph module.
"""

from fpemu.validate.twin.compare import compare_torch
from fpemu.validate.twin.from_keras import from_keras
from fpemu.validate.twin.from_torch import from_torch
from fpemu.validate.twin.keras_compare import compare_keras
from fpemu.validate.twin.model_report import ModelReport, TensorCheck
from fpemu.validate.twin.twin_report import TwinReport

__all__ = ["ModelReport", "TensorCheck", "TwinReport", "compare_keras", "compare_torch",
           "from_keras", "from_torch"]  # fmt: skip
