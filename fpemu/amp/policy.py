"""Mixed-precision policies: which op runs in which format, as plain data.

A :class:`Policy` says, op by op, whether an op runs in the low format (``lower``), is forced to
the wide format (``fp32``), runs in the widest format among its inputs (``promote``), or is
computed wide and its output cast to the low format (``fp32_out_lower``: Keras normalization
layers). An op on no list runs in the widest format of its inputs, which is what PyTorch does for
ops outside the autocast lists (native type promotion). A policy also fixes the parameter format,
master weights, the gradient format and the matmul accumulation (format and model).

The presets mirror PyTorch autocast (CUDA and CPU), Keras dtype policies and NVIDIA Apex opt
levels, op for op, for the ops of :data:`OPS`. The facts come from the project research note
``amp.md`` (sections cited per preset); that note is not read at run time.

The active policy is set with ``with autocast(policy):``, like ``torch.autocast``: a context
manager that changes how ops *inside* it run. Autocast only affects the forward pass; each op's
backward closure captures the formats chosen in the forward pass (as in PyTorch, where the
backward of a half-precision op runs in half). Outside any ``autocast`` block the ``"native"``
policy applies: every op runs in the widest format of its inputs.

>>> p = get_policy("torch_cuda_fp16")
>>> [f.name for f in p.op_formats("linear", ["float32", "float32"])]
['float16', 'float16']
>>> [f.name for f in p.op_formats("softmax", ["float16"])]
['float32', 'float32']
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fpemu.formats import Format, FormatLike, get_format

#: Op names the autograd engine knows; policies may only list these.
OPS: tuple[str, ...] = (
    "linear", "matmul", "add", "mul", "relu", "gelu", "tanh", "sigmoid", "softmax",
    "log_softmax", "cross_entropy", "mse", "sum", "mean", "layer_norm", "silu",
)  # fmt: skip

_LISTS = ("lower", "fp32", "promote", "fp32_out_lower")
#: Unlisted ops whose output keeps the first input's format while mixed-format parameters are
#: used unrounded: CPU layer_norm(x_bf16, w_f32, b_f32) returns bf16 (amp.md 2.4, observed 2.13).
_NATIVE_KEEPS_FIRST = frozenset({"layer_norm"})


def _fmt_or_none(value: FormatLike | None, arg: str) -> Format | None:
    return None if value is None else get_format(value, arg=arg)


@dataclass(frozen=True)
class Policy:
    """One mixed-precision policy. Formats may be given by name; they are stored as Formats.

    Attributes:
        name: preset or user name.
        compute: the low format that ``lower`` ops run in.
        lower: ops whose floating inputs are cast to ``compute`` (autocast ``lower_precision_fp``).
        fp32: ops whose inputs are cast to ``wide`` (autocast ``fp32`` / ``fp32_set_opt_dtype``).
        promote: ops that run in the widest input format (autocast ``promote``, Apex CASTS).
        fp32_out_lower: ops computed in ``wide`` whose output is cast to ``compute``.
        wide: the format of ``fp32`` ops (float32 in every framework preset).
        param: the format parameters are stored and used in by the model.
        master: the optimizer's master-weight format, or None: the optimizer steps ``param``.
        grad: the format parameter gradients are stored in (defaults to ``param``).
        model_input: cast model inputs to this format (Apex O2/O3 patch ``forward``), or None.
        model_output: cast model outputs to this format (Apex O2/O3 cast outputs to fp32), or None.
        acc: accumulation format of matmuls.
        acc_model: accumulation model name for :func:`fpemu.linalg.matmul`.
        scaler: the loss scaler the framework pairs with this policy (a
            :func:`fpemu.amp.scaling.get_scaler` name), or None for no loss scaling.
        scaler_options: keyword arguments for that scaler, as ``(name, value)`` pairs.
        source: where the rules come from.

    >>> p = Policy("mine", compute=get_format("bf16"), lower=frozenset({"linear"}))
    >>> p.compute.name, p.master_weights, p.grad.name
    ('bfloat16', False, 'float32')
    """

    name: str
    compute: Format = field(default_factory=lambda: get_format("float32"))
    lower: frozenset[str] = frozenset()
    fp32: frozenset[str] = frozenset()
    promote: frozenset[str] = frozenset()
    fp32_out_lower: frozenset[str] = frozenset()
    wide: Format = field(default_factory=lambda: get_format("float32"))
    param: Format = field(default_factory=lambda: get_format("float32"))
    master: Format | None = None
    grad: Format | None = None
    model_input: Format | None = None
    model_output: Format | None = None
    acc: Format = field(default_factory=lambda: get_format("float32"))
    acc_model: str = "fast"
    scaler: str | None = None
    scaler_options: tuple[tuple[str, Any], ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        put = object.__setattr__  # frozen dataclass: normalise once here
        for arg in ("compute", "wide", "param", "acc"):
            put(self, arg, get_format(getattr(self, arg), arg=arg))
        for arg in ("master", "model_input", "model_output"):
            put(self, arg, _fmt_or_none(getattr(self, arg), arg))
        grad = self.grad if self.grad is not None else self.param
        put(self, "grad", get_format(grad, arg="grad"))
        seen: dict[str, str] = {}
        for arg in _LISTS:
            ops = getattr(self, arg)
            if isinstance(ops, str) or not isinstance(ops, Iterable):
                raise TypeError(f"{arg} must be a collection of op names, got {ops!r}")
            ops = frozenset(ops)
            for op in sorted(ops):
                if op not in OPS:
                    raise ValueError(f"{arg} lists unknown op {op!r}; known ops: {', '.join(OPS)}")
                if op in seen:
                    raise ValueError(f"op {op!r} is on both the {seen[op]!r} and {arg!r} lists")
                seen[op] = arg
            put(self, arg, ops)
        if not isinstance(self.acc_model, str) or not self.acc_model:
            raise TypeError(f"acc_model must be a model name (str), got {self.acc_model!r}")

    @property
    def grad_format(self) -> Format:
        """The parameter-gradient format (``grad``, which defaults to ``param``)."""
        return self.grad if self.grad is not None else self.param

    @property
    def master_weights(self) -> bool:
        """Whether the optimizer keeps separate master weights."""
        return self.master is not None

    def category(self, op: str) -> str:
        """The list ``op`` is on: one of ``lower fp32 promote fp32_out_lower``, or ``"native"``.

        >>> get_policy("torch_cpu_bf16").category("softmax")
        'native'
        """
        if op not in OPS:
            raise ValueError(f"unknown op={op!r}; known ops: {', '.join(OPS)}")
        for arg in _LISTS:
            if op in getattr(self, arg):
                return arg
        return "native"

    def op_formats(self, op: str, inputs: Sequence[FormatLike]) -> tuple[Format, Format]:
        """Return ``(compute_format, output_format)`` of ``op`` given its floating inputs' formats.

        ``inputs`` are the formats of the op's floating tensor arguments; float64 inputs are never
        lowered (as in PyTorch autocast, which only touches fp32/low tensors).

        >>> [f.name for f in get_policy("keras_mixed_float16").op_formats("layer_norm", ["fp16"])]
        ['float32', 'float16']
        """
        fmts = [get_format(f, arg="inputs") for f in inputs]
        if not fmts:
            raise ValueError(f"op {op!r} needs at least one input format, got inputs={inputs!r}")
        widest = _promote(fmts, self.wide)
        cat = self.category(op)
        if widest.name == "float64" and cat != "native":
            return widest, widest  # autocast eligibility: float64 tensors are left alone
        if cat == "lower":
            return self.compute, self.compute
        if cat == "fp32":
            return self.wide, self.wide
        if cat == "fp32_out_lower":
            return self.wide, self.compute
        if cat == "native" and op in _NATIVE_KEEPS_FIRST:
            return widest, fmts[0]
        return widest, widest  # promote and unlisted ops: widest input wins


def _promote(fmts: Sequence[Format], wide: Format) -> Format:
    """Type promotion: the format that contains all others; float16 with bfloat16 (neither
    contains the other) gives ``wide`` (float32), as ``torch.promote_types`` does."""
    out = fmts[0]
    for f in fmts[1:]:
        if f.ebits >= out.ebits and f.mbits >= out.mbits:
            out = f
        elif not (out.ebits >= f.ebits and out.mbits >= f.mbits):
            out = wide
    return out


def _ops(*names: str) -> frozenset[str]:
    return frozenset(names)


_F16, _F32, _F64 = get_format("float16"), get_format("float32"), get_format("float64")
_MATMULS = _ops("linear", "matmul")
_LOSSES = _ops("cross_entropy", "mse")


def _torch_cuda(low: str) -> Policy:
    # amp.md 2.2 (autocast_mode.h CUDA lists): linear/matmul -> lower_precision_fp; layer_norm,
    # mse_loss, nll_loss -> fp32; softmax, log_softmax, sum -> fp32_set_opt_dtype (fp32 result);
    # cross_entropy = log_softmax (fp32) + nll_loss (fp32). add/mul/activations/mean unlisted.
    return Policy(
        f"torch_cuda_{'fp16' if low == 'float16' else 'bf16'}", compute=get_format(low),
        lower=_MATMULS,
        fp32=_LOSSES | _ops("layer_norm", "softmax", "log_softmax", "sum"),
        scaler="torch" if low == "float16" else None,
        source="PyTorch autocast CUDA lists (amp.md 2.1, 2.2, 2.4)",
    )  # fmt: skip


def _torch_cpu(low: str) -> Policy:
    # amp.md 2.3 (AutocastCPU): linear/matmul lower; mse_loss, nll_loss, cross_entropy_loss fp32;
    # softmax, log_softmax, sum, layer_norm NOT listed on CPU (they run in the input dtype).
    return Policy(
        f"torch_cpu_{'fp16' if low == 'float16' else 'bf16'}", compute=get_format(low),
        lower=_MATMULS,
        fp32=_LOSSES, scaler="torch" if low == "float16" else None,
        source="PyTorch autocast CPU lists (amp.md 2.3, 2.4 observed 2.13)",
    )  # fmt: skip


def _keras(low: str) -> Policy:
    # amp.md 3.1: layers cast floating inputs and autocast variables to the compute dtype, so every
    # op inside a layer runs low (Dense, activations, Softmax layer observed fp16); Loss casts to
    # floatx (fp32); LayerNormalization computes in fp32 and casts its output to the compute dtype.
    # compile() wraps the optimizer in LossScaleOptimizer for mixed_float16 only.
    return Policy(
        f"keras_mixed_{'float16' if low == 'float16' else 'bfloat16'}", compute=get_format(low),
        lower=frozenset(OPS) - _LOSSES - {"layer_norm"}, fp32=_LOSSES,
        fp32_out_lower=_ops("layer_norm"), scaler="keras" if low == "float16" else None,
        source="Keras 3 DTypePolicy mixed_* (amp.md 3.1, 3.2)",
    )  # fmt: skip


_PRESETS: dict[str, Policy] = {}


def _add(p: Policy) -> None:
    _PRESETS[p.name] = p


_add(Policy("fp32", source="plain FP32, no autocast"))
_add(Policy("float64", compute=_F64, wide=_F64, param=_F64, acc=_F64, acc_model="blas64",
            source="plain float64 (reference for gradient checks)"))  # fmt: skip
for _low in ("float16", "bfloat16"):
    _add(_torch_cuda(_low))
    _add(_torch_cpu(_low))
    _add(_keras(_low))
# amp.md 4.1 table: O0 = pure FP32, loss_scale 1.0.
_add(Policy("apex_O0", scaler="static", scaler_options=(("scale", 1.0),),
            source="Apex O0 (amp.md 4.1)"))  # fmt: skip
# amp.md 4.1/4.3: O1 patches torch functions: FP16 list (linear, matmul, mm, addmm), FP32 list
# (sum, softmax, log_softmax, gelu, layer_norm, every loss), CASTS/promote (add, mul); relu, tanh,
# sigmoid, mean unlisted. Weights stay fp32; dynamic loss scale.
_add(Policy(
    "apex_O1", compute=_F16, lower=_MATMULS,
    fp32=_LOSSES | _ops("sum", "softmax", "log_softmax", "gelu", "layer_norm"),
    promote=_ops("add", "mul"), scaler="apex", source="Apex O1 patch lists (amp.md 4.1, 4.3)",
))  # fmt: skip
# amp.md 4.1: O2 = model.half() (BatchNorm kept fp32; we have no BatchNorm), fp32 master weights,
# forward patched to cast inputs to fp16 and outputs to fp32; no function patching.
_add(Policy("apex_O2", compute=_F16, param=_F16, master=_F32, model_input=_F16,
            model_output=_F32, scaler="apex", source="Apex O2 (amp.md 4.1)"))  # fmt: skip
# amp.md 4.1: O3 = pure fp16 model, no master weights, outputs still cast to fp32, loss scale 1.0.
_add(Policy("apex_O3", compute=_F16, param=_F16, model_input=_F16,
            model_output=_F32, scaler="static", scaler_options=(("scale", 1.0),),
            source="Apex O3 (amp.md 4.1)"))  # fmt: skip
# The counterexample: everything fp16, loss included, no master weights, no loss scaling.
_add(Policy("naive_fp16", compute=_F16, param=_F16, model_input=_F16,
            source="counterexample: .half() model, no master weights, no scaling"))  # fmt: skip

#: Short names for presets.
POLICY_ALIASES: dict[str, str] = {
    "float32": "fp32", "fp64": "float64", "O0": "apex_O0", "O1": "apex_O1", "O2": "apex_O2",
    "O3": "apex_O3", "mixed_float16": "keras_mixed_float16",
    "mixed_bfloat16": "keras_mixed_bfloat16", "torch_fp16": "torch_cuda_fp16",
    "torch_bf16": "torch_cuda_bf16", "pure_fp16": "naive_fp16",
}  # fmt: skip


def preset_names() -> tuple[str, ...]:
    """Names of the built-in presets.

    >>> "apex_O2" in preset_names()
    True
    """
    return tuple(_PRESETS)


def get_policy(policy: Policy | str) -> Policy:
    """Resolve a preset name, alias or :class:`Policy` to a Policy.

    Raises:
        ValueError: unknown name (the message lists presets and aliases).
        TypeError: neither a str nor a Policy.

    >>> get_policy("O2").master.name
    'float32'
    """
    if isinstance(policy, Policy):
        return policy
    if not isinstance(policy, str):
        raise TypeError(f"policy must be a preset name or a fpemu.Policy, got {policy!r}")
    key = POLICY_ALIASES.get(policy, policy)
    if key not in _PRESETS:
        raise ValueError(
            f"unknown policy={policy!r}; presets: {', '.join(_PRESETS)}; "
            f"aliases: {', '.join(POLICY_ALIASES)}"
        )
    return _PRESETS[key]


#: Outside autocast every op runs in its inputs' widest format (PyTorch without autocast).
NATIVE = Policy("native", source="no autocast: native type promotion")

_ACTIVE: contextvars.ContextVar[Policy] = contextvars.ContextVar("fpemu_policy", default=NATIVE)


def current_policy() -> Policy:
    """The policy of the innermost ``autocast`` block, or :data:`NATIVE` outside any.

    >>> current_policy().name
    'native'
    """
    return _ACTIVE.get()


@contextlib.contextmanager
def autocast(policy: Policy | str | None = None, *, enabled: bool = True) -> Iterator[Policy]:
    """Run the ops inside the block under ``policy`` (like ``torch.autocast``).

    ``enabled=False`` (or ``policy=None``) restores native behaviour inside the block, as a nested
    ``torch.autocast(enabled=False)`` does.

    >>> with autocast("torch_cpu_bf16") as p:
    ...     current_policy() is p
    True
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {enabled!r}")
    chosen = get_policy(policy) if (enabled and policy is not None) else NATIVE
    token = _ACTIVE.set(chosen)
    try:
        yield chosen
    finally:
        _ACTIVE.reset(token)


def describe(policy: Policy | str) -> dict[str, Any]:
    """A JSON-ready summary of a policy: op -> category plus the storage settings.

    >>> describe("apex_O3")["master"] is None
    True
    """
    p = get_policy(policy)
    return {
        "name": p.name, "compute": p.compute.name, "wide": p.wide.name,
        "ops": {op: p.category(op) for op in OPS}, "param": p.param.name,
        "master": None if p.master is None else p.master.name,
        "grad": p.grad_format.name,
        "model_input": None if p.model_input is None else p.model_input.name,
        "model_output": None if p.model_output is None else p.model_output.name,
        "acc": p.acc.name, "acc_model": p.acc_model, "scaler": p.scaler,
        "scaler_options": dict(p.scaler_options), "source": p.source,
    }  # fmt: skip


def presets_markdown() -> str:
    """A Markdown table of every preset: the category of each op plus the storage settings.

    Categories: ``low`` (lower), ``fp32``, ``promote``, ``fp32>low`` (fp32_out_lower) and ``-``
    (unlisted: the widest input format).

    >>> presets_markdown().splitlines()[0].startswith("| preset |")
    True
    """
    short = {"lower": "low", "fp32": "fp32", "promote": "promote", "fp32_out_lower": "fp32>low",
             "native": "-"}  # fmt: skip
    head = ["preset", "low", *OPS, "params", "master", "in/out cast", "scaler"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in preset_names():
        p = _PRESETS[name]
        casts = "/".join("-" if f is None else f.name for f in (p.model_input, p.model_output))
        cells = [f"`{name}`", p.compute.name, *(short[p.category(op)] for op in OPS),
                 p.param.name, "-" if p.master is None else p.master.name, casts,
                 p.scaler or "-"]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
