"""Collection rules for the whole tree, where torch (the ``torch`` extra) is not installed:
modules that import torch at import time are not collected, and docstring examples that import
torch are skipped, as the framework tests skip themselves."""

from __future__ import annotations

import importlib.util

import pytest

HAVE_TORCH = importlib.util.find_spec("torch") is not None

collect_ignore_glob: list[str] = []
if not HAVE_TORCH:
    collect_ignore_glob += ["fpemu/validate/watch/*.py", "fpemu/emulate/casting.py",
                            "fpemu/emulate/dispatch.py"]  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if HAVE_TORCH:
        return
    skip = pytest.mark.skip(reason="the example imports torch (pip install 'fpemu[torch]')")
    for item in items:
        test = getattr(item, "dtest", None)  # a doctest item
        if test is not None and any("import torch" in ex.source for ex in test.examples):
            item.add_marker(skip)
