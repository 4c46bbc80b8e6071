"""Autocast: the dtype torch's CPU autocast returns, op by op, against fpemu's presets.

Every op fpemu's autograd engine knows (:data:`fpemu.amp.policy.OPS`) is run twice per case: in
torch under ``torch.autocast("cpu", dtype=low)`` and in :mod:`fpemu.nn.functional` under the
matching preset (``torch_cpu_bf16`` / ``torch_cpu_fp16``), with the same argument dtypes
(activations float32 or low, parameters float32). The output dtypes must be the same.

>>> [c.label for c in CASES][:3]
['linear(x, W32, b32)', 'matmul(x, x)', 'matmul(x, W32)']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, get_policy
from fpemu.validate.frameworks.report import CheckResult

#: The presets that mirror torch CPU autocast, and torch's dtype name for their low format.
CPU_PRESETS: tuple[str, ...] = ("torch_cpu_bf16", "torch_cpu_fp16")

_B, _K, _N = 4, 8, 6


@dataclass(frozen=True)
class OpCase:
    """One op call: ``torch_fn(ns)`` and ``fpemu_fn(ns, policy)`` on the same argument dtypes.

    ``ns`` holds the arguments: ``x``, ``y`` and ``z`` (activations in the case's dtype; ``z``
    is K x B), ``W``, ``b``, ``Wk`` (K x N), ``w``, ``lb``, ``f32`` (float32 parameters and
    constants), ``t`` (labels).
    """

    op: str
    label: str
    torch_fn: Callable[[dict[str, Any]], Any]
    fpemu_fn: Callable[[dict[str, Any], Policy], Any]


def _cases() -> list[OpCase]:
    import fpemu.nn.functional as F  # noqa: N812, PLC0415 - keeps the module light to import

    def tf(name: str) -> Any:
        import torch.nn.functional as TF  # noqa: N812, PLC0415 - optional dependency

        return getattr(TF, name)

    c = OpCase
    return [
        c("linear", "linear(x, W32, b32)", lambda n: tf("linear")(n["x"], n["W"], n["b"]),
          lambda n, p: F.linear(n["x"], n["W"], n["b"], policy=p)),
        c("matmul", "matmul(x, x)", lambda n: n["x"] @ n["z"],
          lambda n, p: F.matmul(n["x"], n["z"], policy=p)),
        c("matmul", "matmul(x, W32)", lambda n: n["x"] @ n["Wk"],
          lambda n, p: F.matmul(n["x"], n["Wk"], policy=p)),
        c("add", "add(x, x)", lambda n: n["x"] + n["x"],
          lambda n, p: F.add(n["x"], n["x"], policy=p)),
        c("add", "add(x, f32)", lambda n: n["x"] + n["f32"],
          lambda n, p: F.add(n["x"], n["f32"], policy=p)),
        c("mul", "mul(x, x)", lambda n: n["x"] * n["x"],
          lambda n, p: F.mul(n["x"], n["x"], policy=p)),
        c("mul", "mul(x, f32)", lambda n: n["x"] * n["f32"],
          lambda n, p: F.mul(n["x"], n["f32"], policy=p)),
        c("relu", "relu(x)", lambda n: tf("relu")(n["x"]), lambda n, p: F.relu(n["x"], policy=p)),
        c("gelu", "gelu(x)", lambda n: tf("gelu")(n["x"]), lambda n, p: F.gelu(n["x"], policy=p)),
        c("tanh", "tanh(x)", lambda n: n["x"].tanh(), lambda n, p: F.tanh(n["x"], policy=p)),
        c("sigmoid", "sigmoid(x)", lambda n: n["x"].sigmoid(),
          lambda n, p: F.sigmoid(n["x"], policy=p)),
        c("silu", "silu(x)", lambda n: tf("silu")(n["x"]), lambda n, p: F.silu(n["x"], policy=p)),
        c("softmax", "softmax(x, -1)", lambda n: tf("softmax")(n["x"], dim=-1),
          lambda n, p: F.softmax(n["x"], policy=p)),
        c("log_softmax", "log_softmax(x, -1)", lambda n: tf("log_softmax")(n["x"], dim=-1),
          lambda n, p: F.log_softmax(n["x"], policy=p)),
        c("cross_entropy", "cross_entropy(x, labels)",
          lambda n: tf("cross_entropy")(n["x"], n["t"]),
          lambda n, p: F.cross_entropy(n["x"], n["t"], policy=p)),
        c("mse", "mse_loss(x, f32)", lambda n: tf("mse_loss")(n["x"], n["f32"]),
          lambda n, p: F.mse(n["x"], n["f32"], policy=p)),
        c("mse", "mse_loss(x, x)", lambda n: tf("mse_loss")(n["x"], n["y"]),
          lambda n, p: F.mse(n["x"], n["y"], policy=p)),
        c("sum", "sum(x)", lambda n: n["x"].sum(), lambda n, p: F.sum(n["x"], policy=p)),
        c("mean", "mean(x)", lambda n: n["x"].mean(), lambda n, p: F.mean(n["x"], policy=p)),
        c("layer_norm", "layer_norm(x, w32, b32)",
          lambda n: tf("layer_norm")(n["x"], (_K,), n["w"], n["lb"]),
          lambda n, p: F.layer_norm(n["x"], n["w"], n["lb"], policy=p)),
    ]  # fmt: skip


class _LazyCases(Sequence[OpCase]):
    """The case list, built on first use (it imports fpemu.nn.functional)."""

    _items: list[OpCase] | None = None

    def _get(self) -> list[OpCase]:
        if self._items is None:
            self._items = _cases()
        return self._items

    def __getitem__(self, i: Any) -> Any:
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())


#: Every op case; together they cover every op of :data:`fpemu.amp.policy.OPS`.
CASES: Sequence[OpCase] = _LazyCases()


def _arguments(act: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(torch namespace, fpemu namespace) with the same values; activations in ``act``."""
    import torch  # noqa: PLC0415 - optional dependency

    from fpemu.nn.tensor import Tensor  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    shapes = {"x": (_B, _K), "y": (_B, _K), "z": (_K, _B), "W": (_N, _K), "b": (_N,),
              "Wk": (_K, _N), "w": (_K,), "lb": (_K,), "f32": (_B, _K)}  # fmt: skip
    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[act]
    tns: dict[str, Any] = {}
    fns: dict[str, Any] = {}
    for k, shape in shapes.items():
        fmt = act if k in ("x", "y", "z") else "float32"
        t = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        t = t.to(tdt if fmt == act else torch.float32)
        tns[k] = t
        fns[k] = Tensor(t.to(torch.float32).numpy(), fmt)
    labels = rng.integers(0, _K, size=_B)
    tns["t"] = torch.from_numpy(labels)
    fns["t"] = labels
    return tns, fns


def _torch_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def op_table(policy: Policy | str, *, seed: int = 0) -> list[dict[str, str]]:
    """Rows ``{case, x, torch, fpemu}``: each case's output dtype in torch and in fpemu.

    Raises:
        ValueError: the policy's compute format is not one torch CPU autocast supports.
    """
    import torch  # noqa: PLC0415 - optional dependency

    pol = get_policy(policy)
    low = pol.compute.name
    if low not in ("bfloat16", "float16"):
        raise ValueError(
            f"policy {pol.name!r} computes in {low}; torch CPU autocast supports bfloat16, float16"
        )
    tlow = {"bfloat16": torch.bfloat16, "float16": torch.float16}[low]
    rows = []
    for act in ("float32", low):
        tns, fns = _arguments(act, seed)
        for case in CASES:
            with torch.autocast("cpu", dtype=tlow):
                got_t = _torch_name(case.torch_fn(tns).dtype)
            try:
                got_f = case.fpemu_fn(fns, pol).fmt.name
            except Exception as exc:  # report, never hide, an fpemu failure
                got_f = f"error: {type(exc).__name__}: {exc}"
            rows.append({"case": case.label, "op": case.op, "x": act, "torch": got_t,
                         "fpemu": got_f})  # fmt: skip
    return rows


def check_autocast(
    presets: Sequence[Policy | str] = CPU_PRESETS, *, seed: int = 0
) -> list[CheckResult]:
    """One result per preset: agree when every case's output dtype matches torch's.

    Args:
        presets: preset names or :class:`~fpemu.amp.policy.Policy` objects (tests inject wrong
            ones).
        seed: seed of the argument values (dtypes do not depend on them).
    """
    out = []
    for preset in presets:
        pol = get_policy(preset)
        rows = op_table(pol, seed=seed)
        bad = [r for r in rows if r["torch"] != r["fpemu"]]
        res = CheckResult("autocast", f"torch CPU autocast vs {pol.name}",
                          "differ" if bad else "agree", compared=len(rows),
                          data={"rows": rows})  # fmt: skip
        if bad:
            r = bad[0]
            res.witness = {"case": f"{r['case']} x={r['x']}", "torch": r["torch"],
                           "fpemu": r["fpemu"]}  # fmt: skip
            res.notes = [f"{r['case']} with x={r['x']}: torch {r['torch']}, fpemu {r['fpemu']}"
                         for r in bad[1:]]  # fmt: skip
        out.append(res)
    return out


def op_table_markdown(rows: list[dict[str, str]]) -> str:
    """The rows of :func:`op_table` as a markdown table (differences in bold).

    >>> print(op_table_markdown([{"case": "relu(x)", "x": "float32", "torch": "float32",
    ...                           "fpemu": "float32"}]))
    | case | x | torch | fpemu |
    |---|---|---|---|
    | relu(x) | float32 | float32 | float32 |
    """
    lines = ["| case | x | torch | fpemu |", "|---|---|---|---|"]
    for r in rows:
        f = r["fpemu"] if r["fpemu"] == r["torch"] else f"**{r['fpemu']}**"
        lines.append(f"| {r['case']} | {r['x']} | {r['torch']} | {f} |")
    return "\n".join(lines)
