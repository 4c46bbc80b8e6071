"""Training runs under a policy and loss scaler with per-step observability, data, the experiment.

>>> from fpemu.training import train
>>> r = train("spirals", policy="torch_cuda_fp16", steps=3, seed=0)
>>> len(r.steps)
3
"""

from fpemu.training.datasets import DATASETS, Dataset, get_dataset
from fpemu.training.loop import TrainResult, TrainStep, classify, train, train_step

__all__ = [
    "DATASETS",
    "Dataset",
    "TrainResult",
    "TrainStep",
    "classify",
    "get_dataset",
    "train",
    "train_step",
]
