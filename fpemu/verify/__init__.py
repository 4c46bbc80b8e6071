"""Verification campaigns: exhaustive or sampled checks, cut into chunks that run on Dask.

A :class:`Campaign` is a domain (every code, every pair, every float32 bit pattern, boundary
operands, seeded random samples), a function under test and a reference. :func:`run_campaign`
runs it in one process, on Dask's threaded scheduler (the default when Dask is installed:
``pip install 'fpemu[scale]'``) or on a ``dask.distributed`` cluster, records finished chunks
in a results folder (a rerun skips them) and returns a :class:`Report`.

>>> from fpemu.verify import run_campaign
>>> run_campaign("sqrt-e5m2-rdown", scheduler="sync").headline()
'sqrt-e5m2-rdown: 0 mismatches in 256 cases'
"""

from fpemu.verify.campaign import (
    Campaign,
    campaigns,
    classify,
    evaluate_chunk,
    fpemu_campaign,
    get_campaign,
    register_campaign,
    torch_campaign,
)
from fpemu.verify.checker import MODES, Checker, FpemuOp, exact_parts, round_exact
from fpemu.verify.domains import (
    AllCodes,
    AllPairs,
    AllTuples,
    Boundary,
    Domain,
    Float32Patterns,
    RandomCodes,
    boundary_codes,
    chunk_bounds,
    values,
)
from fpemu.verify.frameworks import TorchOp
from fpemu.verify.report import CLASSES, ChunkResult, Report
from fpemu.verify.run import default_chunks, run_campaign
from fpemu.verify.store import ResultStore

__all__ = [
    "CLASSES",
    "MODES",
    "AllCodes",
    "AllPairs",
    "AllTuples",
    "Boundary",
    "Campaign",
    "Checker",
    "ChunkResult",
    "Domain",
    "Float32Patterns",
    "FpemuOp",
    "RandomCodes",
    "Report",
    "ResultStore",
    "TorchOp",
    "boundary_codes",
    "campaigns",
    "chunk_bounds",
    "classify",
    "default_chunks",
    "evaluate_chunk",
    "exact_parts",
    "fpemu_campaign",
    "get_campaign",
    "register_campaign",
    "round_exact",
    "run_campaign",
    "torch_campaign",
    "values",
]
