"""Procedure findings: the classic mixed-precision mistakes, read from the op sequence and the
GradScaler's state (research note torch-trace.md section 4, and the seeds' fp16 failures).

* ``scaler rebuilt``: a new ``GradScaler`` in a later step than the first one: its scale is
  reset to ``init_scale`` every step, so it never settles and overflows repeat.
* ``step on non-finite gradients``: ``optimizer.step()`` ran while a parameter's gradient held
  inf or NaN (``GradScaler.step`` skips exactly these steps; calling the optimizer directly
  does not).
* ``fp16 backward without loss scaling``: a backward pass computed in float16 in a step whose
  loss no ``GradScaler.scale`` multiplied: small gradients underflow to zero.
* ``clipping scaled gradients``: ``clip_grad_norm_``/``clip_grad_value_`` ran after
  ``scaler.scale(loss).backward()`` and before ``scaler.unscale_(optimizer)``: the threshold is
  compared with gradients that are still multiplied by the scale.
* ``fp16 gradients``: ``optimizer.step()`` on parameters whose ``.grad`` is float16 (no float32
  master copy): updates below half an ulp of the weight vanish.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Procedure"]


class Procedure:
    """Collects procedure findings as the watcher sees events and ops."""

    def __init__(self) -> None:
        self.findings: list[dict[str, Any]] = []
        self._scaler_steps: dict[int, int] = {}
        self._scaled_step: int | None = None
        self._unscaled_step: int | None = None
        self._said: set[tuple[str, int]] = set()

    def _add(self, w: Any, finding: str, detail: str, *, once: bool = True) -> None:
        key = (finding, w.current_step)
        if once and key in self._said:
            return
        self._said.add(key)
        self.findings.append(
            {
                "step": w.current_step,
                "finding": finding,
                "phase": w.phase(),
                "module": w.module(),
                "detail": detail,
            }
        )

    def event(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any, w: Any
    ) -> None:
        """A hooked call finished (``scaler.init``, ``scaler.scale``, ``clip.*``, ...)."""
        if name == "scaler.init":
            if self._scaler_steps and w.current_step > max(self._scaler_steps.values()):
                self._add(
                    w,
                    "scaler rebuilt",
                    f"a new GradScaler at step {w.current_step} (the first at step "
                    f"{min(self._scaler_steps.values())}): its scale restarts at init_scale "
                    "every step; create the scaler once, before the loop",
                )
            self._scaler_steps[id(args[0])] = w.current_step
        elif name in ("scaler.scale", "keras.scale_loss"):
            self._scaled_step = w.current_step
        elif name == "scaler.update":
            w.end_step()
        elif name == "scaler.unscale_":
            self._unscaled_step = w.current_step
        elif (
            name.startswith("clip.")
            and self._scaled_step == w.current_step
            and self._unscaled_step != w.current_step
        ):
            self._add(
                w,
                "clipping scaled gradients",
                f"{name[5:]} ran on gradients still multiplied by the loss scale; call "
                "scaler.unscale_(optimizer) first",
            )

    def op(self, row: dict[str, Any], name: str, args: Any, kwargs: Any, outs: Any, w: Any) -> None:
        """Every dispatched op (its row already filled)."""
        if (
            row["phase"] == "backward"
            and self._scaled_step != w.current_step
            and (
                "float16" in row["out_dtypes"] and row["node"] != "torch::autograd::AccumulateGrad"
            )
        ):
            self._add(
                w,
                "fp16 backward without loss scaling",
                f"{name} computed a float16 gradient in a step whose loss no "
                "GradScaler scaled: small gradients flush to zero",
            )

    def optimizer_step(self, opt: Any, w: Any) -> None:
        """``optimizer.step()`` is about to run: check the gradients it will use."""
        import torch  # noqa: PLC0415

        with w.internal():
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            bad = _non_finite(grads)
            half = [i for i, g in enumerate(grads) if g.dtype == torch.float16]
        if bad:
            self._add(
                w,
                "step on non-finite gradients",
                f"optimizer.step() ran with inf/NaN in {len(bad)} of {len(grads)} gradients; "
                "GradScaler.step(optimizer) skips such steps",
            )
        if half and not w.policy.half_params:
            self._add(
                w,
                "fp16 gradients",
                f"{len(half)} parameters step from float16 .grad without float32 master "
                "weights: updates below half an ulp of a weight are lost",
            )

    def finish(self, w: Any) -> None:
        """The block ended."""


def _non_finite(grads: list[Any]) -> list[int]:
    """The indices of the tensors in ``grads`` that hold an inf or a NaN.

    One ``_foreach_norm`` of order inf (the largest magnitude: inf or NaN exactly where the
    tensor holds one; its reduction propagates NaN) and one ``isfinite`` of the stacked norms,
    not an ``isfinite(g).all()`` per tensor: each op the watcher runs passes through its
    dispatch mode, and an optimizer has a gradient per parameter (measured: 2 ms a step of the
    bench GPT's 28). Empty tensors (no identity for the norm) are finite.
    """
    import torch  # noqa: PLC0415

    idx = [i for i, g in enumerate(grads)
           if g.numel() and (g.is_floating_point() or g.is_complex())]  # fmt: skip
    if not idx:
        return []
    norms = torch._foreach_norm([grads[i] for i in idx], float("inf"))
    ok = torch.isfinite(torch.stack(norms)).tolist()  # (stack promotes mixed dtypes)
    return [i for i, fine in zip(idx, ok, strict=True) if not fine]
