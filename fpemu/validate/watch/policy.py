"""The ``policy`` verdict: an op that brings a low-precision dtype into the computation where the
AMP policy does not prescribe it.

A low dtype (bfloat16, float16, float8) is *introduced* by an op whose outputs hold it while
none of its tensor inputs does and some floating input is of another dtype: a narrowing cast,
a custom kernel. (Bools, integers and factories of constants bring in no rounding of data.)
Ops that merely compute in a dtype their inputs already have are judged where that dtype came
in, once. An introduction is
prescribed when

* forward (and optimizer/scaler ops outside autocast are never prescribed one): autocast is
  enabled (``torch.autocast``, read each time an autocast block is entered or left) with that
  dtype as its fast dtype, or the declared policy (``watch(policy=...)``) computes or stores
  parameters in it;
  for Keras 3 on torch the declared policy is Keras's global dtype policy
  (``mixed_bfloat16`` computes in bfloat16: its layers cast their inputs themselves);
* backward: the op runs in a built-in autograd node (torch's own backward mirrors the forward's
  dtypes: ``ToCopyBackward0`` narrows back what a forward cast widened). Inside the backward of a
  custom ``torch.autograd.Function`` a new low dtype is the Function's own choice: ``policy``.

Higher precision than prescribed (an ``autocast(enabled=False)`` region computing in float32) is
never flagged: it loses nothing. Within a float16 autocast run, a manual ``.half()`` is that
policy's own format and is not flagged either.
"""

from __future__ import annotations

from typing import Any

from fpemu.validate.watch.convert import dtype_name

__all__ = ["LOW_DTYPES", "PolicyCheck"]

LOW_DTYPES = frozenset({"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"})
_FLOATS = LOW_DTYPES | {"float32", "float64"}


class PolicyCheck:
    """Judges each op's dtypes against the policy (see the module docstring)."""

    def __init__(self, policy: Any = None) -> None:
        self.declared: frozenset[str] = frozenset()
        self.name = "autocast (as the program sets it)"
        if policy is not None:
            from fpemu.amp.policy import get_policy  # noqa: PLC0415

            p = get_policy(policy)
            self.name = p.name
            names = {p.compute.name, p.param.name, (p.master or p.param).name}
            names.add(p.grad.name if p.grad is not None else p.param.name)
            self.declared = frozenset(names & LOW_DTYPES)
        keras_low = _keras_compute()
        if policy is None and keras_low:
            self.name = f"Keras dtype policy (compute {keras_low})"
            self.declared = frozenset({keras_low})
        self.half_params = "float16" in self.declared and policy is not None
        self.autocast: tuple[bool, str] = (False, "")

    def allowed(self, phase: str, node: Any) -> frozenset[str]:
        """The low dtypes an op may introduce now."""
        import torch  # noqa: PLC0415

        if phase == "backward":
            custom = isinstance(node, torch.autograd.function.BackwardCFunction)
            return self.declared if custom else LOW_DTYPES
        if phase == "forward" and self.autocast[0]:
            return self.declared | {self.autocast[1]}
        return self.declared

    def check(
        self, row: dict[str, Any], name: str, args: Any, kwargs: Any, outs: list[Any], w: Any
    ) -> None:
        """Set ``row``'s verdict to ``policy`` if the op introduces a low dtype not prescribed."""
        outs_low = LOW_DTYPES.intersection(row["out_dtypes"])
        if not outs_low:  # most ops: no low output (no set built)
            return
        ins = set(row["in_dtypes"])
        new = outs_low - ins
        if not new or not ins & _FLOATS:
            return
        bad = sorted(new - self.allowed(row["phase"], w.node))
        if not bad or row["verdict"] == "differs":
            return
        where = {
            "backward": "in the backward of a custom autograd.Function"
            if row["node"]
            else "in the backward"
        }.get(row["phase"], f"in the {row['phase']}")
        ac = f"autocast {self.autocast[1]}" if self.autocast[0] else "autocast off"
        row["verdict"] = "policy"
        row["cause"] = (
            f"{name} brings {', '.join(bad)} into the computation {where} "
            f"({ac}; policy: {self.name})"
        )


def _keras_compute() -> str:
    """The low compute dtype of Keras's global dtype policy when Keras runs on torch, else ""."""
    import sys  # noqa: PLC0415

    keras = sys.modules.get("keras")
    if keras is None or keras.config.backend() != "torch":
        return ""
    name = str(keras.config.dtype_policy().compute_dtype)
    return name if name in LOW_DTYPES else ""


def autocast_state() -> tuple[bool, str]:
    """CPU autocast's state now: (enabled, fast dtype name)."""
    import torch  # noqa: PLC0415

    on = torch.is_autocast_enabled("cpu")
    return on, dtype_name(torch.get_autocast_dtype("cpu")) if on else ""
