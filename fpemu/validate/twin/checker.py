"""The checks of one ``compare_keras`` step, in execution order, and their causes.

Every tensor of the step is compared bit for bit (``model_report.compare_arrays``); one that
differs is explained by recomputing the op in fpemu **from torch's own inputs**: the forward op
from torch's input activations and parameters, the loss from torch's output, each backward from
torch's upstream gradient, the optimizer update from torch's parameters, optimizer state and
gradients. A bit-identical recomputation means the difference was ``propagated``; otherwise the
op's own numerics are bounded (``fpemu.validate.twin.causes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, autocast
from fpemu.nn import functional as fn
from fpemu.nn.graph import GRAPH_OPS, GraphModule, Param, Ref
from fpemu.nn.optim import Optimizer
from fpemu.nn.tensor import Tensor, round_to
from fpemu.validate.twin import causes, norm_bounds, update_checks
from fpemu.validate.twin.keras_ops import keras_mse
from fpemu.validate.twin.model_report import ModelReport, TensorCheck, compare_arrays
from fpemu.validate.twin.torch_run import TorchStep, exact_leaf, fmt_of, to_np


def loss_value(loss: str, out: Tensor, y: np.ndarray) -> Tensor:
    """The loss named ``loss`` of the model output: ``cross_entropy``, ``mse`` (torch's
    ``mse_loss``) or ``keras_mse`` (Keras's ``MeanSquaredError``)."""
    if loss == "cross_entropy":
        return fn.cross_entropy(out, np.asarray(y))
    if loss == "keras_mse":
        return keras_mse(out, y)
    # the target is float32 data (torch's autocast runs mse_loss in float32: it is not rounded
    # to the prediction's low format)
    return fn.mse(out, Tensor(np.asarray(y, np.float64), "float32"))


class StepChecker:
    """The checks of one step, in execution order."""

    def __init__(self, report: ModelReport, step: int, twin: GraphModule, pol: Policy,
                 t: TorchStep, f: dict[str, Any], before: dict[str, np.ndarray],
                 shadow: Optimizer, loss: str) -> None:  # fmt: skip
        self.r, self.s, self.twin, self.pol, self.t, self.f = report, step, twin, pol, t, f
        self.before, self.shadow, self.loss = before, shadow, loss
        self.params_differ = any(before[n] is not t.params_before[n] and
                                 not np.array_equal(before[n], t.params_before[n])
                                 for n in before)  # fmt: skip
        self.upstream = ""  # the first differing tensor of this step so far
        self._grad_cache: dict[str, dict[Any, Any] | None] = {}
        # torch's tensors as (read-only NumPy array, format), converted once per step
        self._arrays: dict[tuple[str, str], tuple[np.ndarray, str]] = {}
        # node name -> (leaves, output) of the op recomputed from torch's inputs: the forward
        # explanation's recomputation is reused by the backward one (the same op on the same
        # inputs; requires_grad and grad_fmt do not change a forward result)
        self._local: dict[str, tuple[dict[Any, Tensor], Tensor]] = {}
        self._shadow_done = False
        #: the loss on torch's output, once the loss's backward has been recomputed
        self.local_loss: Tensor | None = None

    def arr(self, which: str, name: str) -> tuple[np.ndarray, str]:
        """torch's ``acts``/``act_grads`` entry ``name`` as a read-only array and its format."""
        key = (which, name)
        hit = self._arrays.get(key)
        if hit is None:
            v = getattr(self.t, which)[name]
            a = to_np(v)
            a.setflags(write=False)  # shared by every recomputation: nothing may write it
            hit = self._arrays[key] = (a, fmt_of(v))
        return hit

    def add(self, kind: str, name: str, tv: np.ndarray, tfmt: str, fv: np.ndarray, ffmt: str,
            op: str = "") -> TensorCheck:  # fmt: skip
        c = TensorCheck(self.s, kind, name, op, tfmt, ffmt, **compare_arrays(tv, fv, tfmt, ffmt))
        self.r.checks.append(c)
        return c

    def propagated(self, c: TensorCheck) -> bool:
        src = self.upstream or ("the parameters (from an earlier step)" if self.params_differ
                                else "")  # fmt: skip
        if src:
            c.cause, c.explained = "propagated", True
            c.note = f"follows the earlier difference in {src}"
        return bool(src)

    def mark(self, c: TensorCheck) -> None:
        if not c.exact and not self.upstream:
            self.upstream = f"step {c.step} {c.kind} {c.name!r}"

    def run(self) -> None:
        self.forward()
        self.loss_check()
        self.backward()
        self.param_grads()
        self.scaler_check()
        self.params()

    # -- forward -------------------------------------------------------------------------------
    def forward(self) -> None:
        for node in self.twin.nodes:
            if node.op == "input" or node.name == "output":
                continue
            (ta, tfmt), fa = self.arr("acts", node.name), self.f["acts"][node.name]
            c = self.add("activation", node.name, ta, tfmt, np.asarray(fa.data), fa.fmt.name,
                         node.op)  # fmt: skip
            if not c.exact:
                self.explain_forward(c, node)
            self.mark(c)

    def _local_args(self, node: Any) -> list[Any]:
        out = []
        for a in node.args:
            if isinstance(a, Ref):
                out.append(exact_leaf(*self.arr("acts", a.name)))
            elif isinstance(a, Param):
                out.append(exact_leaf(self.t.params_before[a.name], "float32"))
            else:
                out.append(a)
        return out

    def explain_forward(self, c: TensorCheck, node: Any) -> None:
        if c.torch_format != c.fpemu_format:
            c.cause, c.explained = "format", False
            c.note = (
                f"torch computes {node.op} in {c.torch_format}, the fpemu policy "
                f"{self.pol.name!r} in {c.fpemu_format}: the policy entry differs"
            )
            return
        leaves, local = self._local_graph(node)
        args = [leaves.get(a, a) for a in node.args]
        tv = self.arr("acts", node.name)[0]
        lc = compare_arrays(tv, np.asarray(local.data), c.torch_format, local.fmt.name)
        c.local_ulps = lc["max_ulps"]
        if lc["identical"] == lc["compared"] and self.propagated(c):
            return
        bound = None
        if node.op in causes.MATMUL_OPS:
            xs = [np.asarray(a.data) if isinstance(a, Tensor) else a for a in args]
            bound = causes.matmul_within(tv, np.asarray(local.data), xs[0], xs[1],
                                         xs[2] if len(xs) > 2 else None, fmt=c.torch_format,
                                         transpose=node.op == "linear")  # fmt: skip
        if node.op in causes.MATH_OPS and c.torch_format not in causes.LOW:
            xin = np.asarray(args[0].data)
            bound = causes.within(tv, np.asarray(local.data), causes.math_bound(
                node.op, xin, None, out=c.torch_format), c.torch_format)  # fmt: skip
        k = int(tv.shape[-1]) if tv.ndim else 1
        c.cause, c.explained, c.bound_ulps = causes.explain_local(
            node.op, c.torch_format, c.local_ulps, k, bound
        )
        c.note = (
            f"{node.op} recomputed by fpemu from torch's inputs differs by "
            f"{c.local_ulps:g} ulp (bound {c.bound_ulps})"
        )

    # -- loss ----------------------------------------------------------------------------------
    def loss_check(self) -> None:
        tl, fl = self.t.loss, self.f["loss"]
        tlv = to_np(tl)
        c = self.add("loss", self.loss, tlv, fmt_of(tl), np.asarray(fl.data), fl.fmt.name,
                     self.loss)  # fmt: skip
        if c.exact:
            return
        with np.errstate(all="ignore"), autocast(self.pol):
            local = loss_value(self.loss, exact_leaf(*self.arr("acts", "output")), self.t.target)
        lc = compare_arrays(tlv, np.asarray(local.data), c.torch_format, local.fmt.name)
        c.local_ulps = lc["max_ulps"]
        if lc["identical"] == lc["compared"] and self.propagated(c):
            return
        shape = np.shape(self.arr("acts", "output")[0])
        k = int(np.prod(shape)) if self.loss in ("mse", "keras_mse") else int(np.sum(shape))
        c.cause, c.explained, c.bound_ulps = causes.explain_local(
            self.loss, c.torch_format, c.local_ulps, k
        )
        how = ("log_softmax + nll_loss: its own reduction order and exp/log"
               if self.loss == "cross_entropy" else "float32 sums in its own order")  # fmt: skip
        c.note = (
            f"the framework's {self.loss} ({how}) vs fpemu's, on the framework's output: "
            f"{c.local_ulps:g} ulp"
        )

    # -- backward ------------------------------------------------------------------------------
    def backward(self) -> None:
        for node in reversed(self.twin.nodes):
            if node.op == "input" or node.name == "output":
                continue
            fa = self.f["acts"][node.name]
            if self.t.act_grads.get(node.name) is None or fa.grad is None:
                continue
            tg, gfmt = self.arr("act_grads", node.name)
            c = self.add("backward", node.name, tg, gfmt, np.asarray(fa.grad), fa.grad_fmt.name,
                         node.op)  # fmt: skip
            if not c.exact:
                leaf = exact_leaf(*self.arr("acts", node.name), requires_grad=True)
                self.explain_backward(c, Ref(node.name), leaf, scaled=True)

    def _consumers(self, ref: Ref | Param) -> list[Any]:
        return [n for n in self.twin.nodes if ref in n.args and n.op != "input"]

    def _consumer_grads(self, cons: Any) -> dict[Any, Any] | None:
        """Gradients of every input of node ``cons`` recomputed by fpemu: the op on torch's
        inputs, backward from torch's gradient of its output (cached per node and step)."""
        if cons.name in self._grad_cache:
            return self._grad_cache[cons.name]
        leaves: dict[Any, Tensor] = {}
        with np.errstate(all="ignore"):
            if cons.name == "output":  # the loss consumes the model output
                ref = cons.args[0]
                leaves[ref] = exact_leaf(*self.arr("acts", ref.name), requires_grad=True)
                with autocast(self.pol):
                    lv = self.local_loss = loss_value(self.loss, leaves[ref], self.t.target)
                s32: Any = np.float32(self.t.scale)  # a float32 tensor in torch's scale()
                (fn.mul(lv, s32) if self.t.scale != 1 else lv).backward()
            else:
                if self.t.act_grads.get(cons.name) is None:
                    self._grad_cache[cons.name] = None
                    return None
                g, gfmt = self.arr("act_grads", cons.name)
                leaves, out = self._local_graph(cons)  # kept: later uses read only .data
                # torch's gradient holds values of its format: no rounding when it is fpemu's
                out.backward(g.astype(out.data.dtype), exact=gfmt == out.grad_fmt.name)
        grads = {a: t.grad for a, t in leaves.items()}
        self._grad_cache[cons.name] = grads
        return grads

    def _local_graph(self, node: Any) -> tuple[dict[Any, Tensor], Tensor]:
        """``node``'s op recomputed by fpemu from torch's inputs: (one leaf per distinct
        ``Ref``/``Param`` argument, requiring gradients where torch has one, parameters' in the
        policy's gradient format; the output), computed once per node and step."""
        hit = self._local.get(node.name)
        if hit is not None:
            return hit
        leaves: dict[Any, Tensor] = {}
        args = []
        for a, v in zip(node.args, self._local_args(node), strict=True):
            if isinstance(a, (Ref, Param)) and isinstance(v, Tensor):
                if a not in leaves:
                    # an activation's gradient only where torch has one to compare (not the
                    # model's input: that would be one more GEMM per first layer, unused)
                    v.requires_grad = isinstance(a, Param) or \
                        self.t.act_grads.get(a.name) is not None  # fmt: skip
                    if isinstance(a, Param):
                        v.grad_fmt = self.pol.grad_format
                    leaves[a] = v
                v = leaves[a]
            args.append(v)
        with np.errstate(all="ignore"), autocast(self.pol):
            out = GRAPH_OPS[node.op](*args, **dict(node.options))
        self._local[node.name] = (leaves, out)
        return leaves, out

    def _local_grad(self, ref: Ref | Param, leaf: Tensor) -> tuple[Any, str] | None:
        """``ref``'s gradient recomputed by fpemu from torch's inputs and upstream gradients,
        summed over its consumers in ``leaf``'s gradient format; returns (grad, the ops)."""
        ops, total = [], None
        for cons in self._consumers(ref):
            grads = self._consumer_grads(cons)
            if grads is None:
                return None
            g = grads.get(ref)
            if g is not None:
                total = g if total is None else round_to(total + g, leaf.grad_fmt)
            ops.append(self.loss if cons.name == "output" else cons.op)
        if total is None or not ops:
            return None
        return total, "+".join(ops)

    def explain_backward(self, c: TensorCheck, ref: Ref | Param, leaf: Tensor, *,
                         scaled: bool, tv: np.ndarray | None = None) -> None:  # fmt: skip
        """Cause of a differing gradient: recompute it from torch's upstream gradients."""
        got = self._local_grad(ref, leaf)
        if got is None:
            c.cause, c.explained, c.note = "unexplained", False, "no local recomputation"
            return
        g, op = got
        tv = self.arr("act_grads", ref.name)[0] if tv is None else tv
        unscale = self.t.scale if self.t.unscaled else 1.0  # parameter gradients' divisor
        if not scaled and unscale != 1:  # torch's unscale_: times float32(1/float64(s))
            g = (np.asarray(g, np.float32) * np.float32(1.0 / unscale)).astype(np.float32)
        lc = compare_arrays(tv, np.asarray(g), c.torch_format, c.torch_format)
        c.local_ulps = lc["max_ulps"]
        if lc["identical"] == lc["compared"]:
            c.cause, c.explained = "propagated", True
            c.note = (
                f"the backward of {op} on torch's inputs and upstream gradient is "
                "bit-identical: an upstream gradient or input differs"
            )
            return
        first = op.split("+")[0]
        bound = None
        cons = self._consumers(ref)
        if len(cons) == 1 and first in causes.MATMUL_OPS and first == "linear":
            node = cons[0]
            gu = self.arr("act_grads", node.name)[0].astype(np.float64)
            args = self._local_args(node)
            fmt = self.pol.op_formats("linear", [a.fmt for a in args if isinstance(a, Tensor)])
            out = fmt[0].name
            inv = 1.0 if scaled else 1.0 / unscale
            if isinstance(ref, Ref):  # dx = g @ W
                xw = (gu, np.asarray(args[1].data))
            elif node.args[1] == ref:  # dW = g^T x
                xw = (gu.T, np.asarray(args[0].data))
            else:  # db = sum over the batch
                xw = (np.ones((1, gu.shape[0])), gu)
            # dW is rounded to the compute format first (first_fmt), then unscaled (inv)
            bound = causes.matmul_within(tv, np.asarray(g), *xw, fmt=c.torch_format,
                                         transpose=False, scale=inv, first_fmt=out)  # fmt: skip
        if first == "layer_norm" and len(cons) == 1 and isinstance(ref, Param):
            bound = self._layer_norm_param_bound(cons[0], ref, tv, np.asarray(g))
        if first in causes.MATH_OPS and c.torch_format not in causes.LOW and len(cons) == 1:
            gu = self.arr("act_grads", cons[0].name)[0]
            bound = causes.within(tv, np.asarray(g), causes.math_bound(
                first, np.asarray(leaf.data), gu, out=c.torch_format), c.torch_format)  # fmt: skip
        k = int(tv.shape[0]) if tv.ndim else 1
        c.cause, c.explained, c.bound_ulps = causes.explain_local(
            first, c.torch_format, c.local_ulps, k, bound
        )
        if not c.explained and first == "layer_norm" and len(cons) == 1 and \
                isinstance(ref, Ref):  # fmt: skip
            c.explained, c.bound_ulps = causes.within(
                tv, np.asarray(g), self._layer_norm_input_bound(cons[0]), c.torch_format
            )
        c.note = (
            f"the backward of {op} recomputed by fpemu from torch's inputs and upstream "
            f"gradient differs by {c.local_ulps:g} ulp (bound {c.bound_ulps})"
        )

    def _layer_norm_input_bound(self, node: Any) -> np.ndarray:
        return norm_bounds.layer_norm_input_bound(
            self.arr("acts", node.args[0].name)[0],
            self.arr("act_grads", node.name)[0],
            self.t.params_before[node.args[1].name],
            dict(node.options).get("eps", 1e-5),
        )

    def _layer_norm_param_bound(self, node: Any, ref: Param, tv: np.ndarray,
                                fv: np.ndarray) -> tuple[bool, float]:  # fmt: skip
        x, low = self.arr("acts", node.args[0].name)
        unscale = self.t.scale if self.t.unscaled else 1.0
        g = self.arr("act_grads", node.name)[0].astype(np.float64) / unscale
        return norm_bounds.layer_norm_param_bound(
            x,
            g,
            tv,
            fv,
            weight=node.args[1] == ref,
            low=low if self.pol.category("layer_norm") == "native" else "float32",
        )

    def param_grads(self) -> None:
        names = [n for n, _ in self.twin.named_parameters()]
        for name, fg in zip(names, self.f["grads"], strict=True):
            tg = self.t.grads.get(name)
            if tg is None or fg is None:
                continue
            c = self.add("grad", name, tg, "float32", np.asarray(fg, np.float32), "float32")
            if not c.exact:
                leaf = exact_leaf(self.t.params_before[name], "float32", requires_grad=True)
                leaf.grad_fmt = self.pol.grad_format
                self.explain_backward(c, Param(name), leaf, scaled=False, tv=tg)
            self.mark(c)

    # -- scaler and parameters: fpemu.validate.twin.update_checks ---------------------------
    def scaler_check(self) -> None:
        update_checks.scaler_check(self)

    def _shadow_step(self) -> None:
        update_checks.shadow_step(self)

    def params(self) -> None:
        update_checks.params_check(self)
