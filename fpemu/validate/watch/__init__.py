"""``fpemu.watch``: judge every ATen op of your own torch training step against fpemu.

Wrap your unmodified code (model, autocast, GradScaler, optimizer, custom Functions, hooks,
in-place ops) in ``with fpemu.watch() as w:``. Every ATen op torch dispatches, forward,
backward, optimizer and scaler, is compared with fpemu's emulation of that op computed from
torch's own inputs (:mod:`fpemu.validate.ops`), so every finding is local to one op. Verdicts:
``identical``, ``bounded`` (within a derived bound; the row gives its reason), ``differs``,
``policy`` (a low-precision dtype the AMP policy does not prescribe), ``not_emulated``
(listed, never passed silently); and procedure findings (a GradScaler rebuilt every step, a
step on non-finite gradients, fp16 backward without loss scaling, clipping scaled gradients).

>>> import torch, fpemu
>>> net = torch.nn.Linear(4, 2)
>>> with fpemu.watch() as w:
...     net(torch.ones(3, 4)).sum().backward()
>>> w.report().counts["differs"], w.report().ok
(0, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fpemu.validate.watch.report import VERDICTS, WatchReport

__all__ = ["VERDICTS", "Watch", "WatchReport", "watch"]


class Watch:
    """The handle ``with fpemu.watch() as w`` gives: ``w.report()`` once the block ends (or
    during it, for what was seen so far)."""

    def __init__(self, watcher: Any, settings: dict[str, Any]) -> None:
        self._watcher = watcher
        self.settings = settings

    def report(self) -> WatchReport:
        """The report of everything seen so far."""
        w = self._watcher
        w.settle()
        settings = {
            **self.settings,
            "capability": w.capability,
            "steps": _training_steps(w.rows),
            "watch_seconds": round(w.seconds, 3),
            "worker_judgements": w.worker_judgements,
        }
        return WatchReport(
            rows=list(w.rows), procedure=list(w.procedure.findings), settings=settings
        )


def _training_steps(rows: list[dict[str, Any]]) -> int:
    """Steps that ran a backward pass or an update (forward-only work after the last update,
    such as a framework's end-of-epoch metrics, starts no training step)."""
    trained = [r["step"] for r in rows if r["phase"] != "forward"]
    return max(trained) + 1 if trained else 0


@contextlib.contextmanager
def watch(*, policy: Any = None) -> Iterator[Watch]:
    """Watch every ATen op torch runs inside the block; ``w.report()`` afterwards.

    Args:
        policy: None (default) to take the policy from the program's own ``torch.autocast``
            regions, or an fpemu policy (a preset name such as ``"torch_cpu_bf16"`` or a
            :class:`fpemu.Policy`) whose compute and parameter formats the program may also use
            outside autocast (``model.half()`` training).

    Raises:
        ValueError: unknown policy name.
        TypeError: ``policy`` is not a name or a Policy.
        ModuleNotFoundError: torch is not installed (the ``torch`` extra).
    """
    if policy is not None:
        from fpemu.amp.policy import Policy, get_policy  # noqa: PLC0415

        if not isinstance(policy, (str, Policy)):
            raise TypeError(f"policy must be a preset name or a Policy, got {policy!r}")
        get_policy(policy)
    from fpemu.validate.watch.watcher import Watcher  # noqa: PLC0415 - imports torch

    watcher = Watcher(policy=policy)
    settings = {"policy": watcher.policy.name}
    with watcher.installed():
        yield Watch(watcher, settings)
