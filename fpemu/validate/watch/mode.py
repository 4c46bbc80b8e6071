"""The watcher's torch modes: every ATen op passes through :meth:`Watcher.dispatch`; every
torch-function call first records autocast's state (which dispatch-time code cannot read
reliably: inside autocast's own redispatch the state reads as disabled)."""

from __future__ import annotations

from typing import Any

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from fpemu.validate.watch.policy import autocast_state

__all__ = ["AutocastMode", "WatchMode"]


class WatchMode(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
    """Hands each dispatched op to the watcher, which runs it and judges its outputs."""

    def __init__(self, watcher: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.watcher = watcher

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.watcher.dispatch(func, tuple(args), dict(kwargs or {}))


class AutocastMode(TorchFunctionMode):  # type: ignore[misc,no-untyped-call]
    """Notes autocast's state at each torch-function call for the policy check."""

    def __init__(self, watcher: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.watcher = watcher

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.watcher.policy.autocast = autocast_state()
        return func(*args, **(kwargs or {}))
