"""The watcher's ``TorchDispatchMode``: every ATen op passes through :meth:`Watcher.dispatch`."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["WatchMode"]


class WatchMode(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
    """Hands each dispatched op to the watcher, which runs it and judges its outputs."""

    def __init__(self, watcher: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.watcher = watcher

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.watcher.dispatch(func, tuple(args), dict(kwargs or {}))
