"""Where the watcher judges a call: here and now, or queued for the worker process.

A worker process (:mod:`fpemu.offload`) judges queued calls on the core torch leaves idle,
from copies of their operands made when they are queued. The watcher's own thread is the
training step's: what it judges delays the step, but it judges from torch's memory, with no
copy. :func:`decide` weighs the two:

* a call of fewer than :data:`SMALL` elements is judged here (queueing one costs more than
  judging it), and so is every call while no worker is ready;
* otherwise the call is queued, unless the worker already has at least :data:`MARGIN` seconds
  more queued than the call costs: then it is judged here while the worker works through its
  queue (no copy of its operands). That happens where the worker falls far behind (the
  machine's other core busy): the step then degrades towards one core's speed, not below it.

A call's cost is its kind's last measured seconds (:data:`COSTS`: the op and its arguments'
shapes, timed in whichever process judged it; a training loop repeats its calls step after
step), or :data:`COST0` per element for a kind not timed yet.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> c = Call("aten.mul.Tensor", (np.ones(8, np.float32),), {}, ("float32",),
...          options={"outputs": [np.ones(8, np.float32)]})
>>> elements(c), decide(None, c)
(16, Placement(key=None, cost=0.0, queue=False))
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fpemu.validate.ops import Call

__all__ = ["AHEAD", "COST0", "COSTS", "HERE", "MARGIN", "SMALL", "Placement", "decide",
           "elements", "learn"]  # fmt: skip

#: ops judged in the step's thread even where a worker runs the others: one correctly rounded
#: operation per element, cheaper to judge than to copy for a worker (measured on the bench
#: GPT: a cast or an optimizer's ``mul_``/``add_``/``div`` costs about as much to queue as to
#: judge; a GEMM, attention, a norm or a libm function many times more)
HERE = frozenset(
    {
        "_to_copy", "copy_", "clone", "zeros_like", "ones_like", "empty_like", "fill_",
        "zero_", "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "neg_",
        "abs", "abs_", "eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill",
        "masked_fill_", "lift_fresh", "lift_fresh_copy", "scalar_tensor", "full", "arange",
        "addcdiv", "addcdiv_", "as_strided_",
    }
)  # fmt: skip
#: a call whose arrays hold fewer elements is judged in the step's thread: queueing one costs
#: ~75 us of the two processes' time (measured: a pickle, the ring, two pipe messages), more
#: than judging an optimizer's update of a bias or a norm's weight
SMALL = 4096
#: seconds per element a judgement is assumed to cost until one of its kind has been timed
#: (about the bench GPT's median over its ops)
COST0 = 5e-9
#: a call is judged here, not queued, when the worker has at least this many seconds more
#: queued than the call is estimated to cost. Measured on the bench GPT (2 cores): the worker's
#: queue peaks at 30-55 ms mid-step and it catches up by the end, so a smaller margin (20 ms
#: was tried) judges here what the worker would have judged later: the worker then idles
#: (26 -> 33 ms a bf16 step, 13 -> 28 ms float32) while this thread, torch's, is the critical
#: path. At 100 ms it is a safety valve: where the worker gets no core (a busy machine), its
#: queue grows past it and this thread judges, with no copies, as with no worker at all.
MARGIN = 0.1
#: before judging a call here, the worker is sent at least its estimated cost and this many
#: seconds more of its queue (it must not run dry while this thread is busy; what is sent
#: cannot be taken back at the end)
AHEAD = 1e-3
#: (op, its arguments' shapes) -> the seconds its last judgements took (a moving average of
#: the wall-clock time, here or in the worker), for this process
COSTS: dict[tuple[Any, ...], float] = {}
#: most entries of :data:`COSTS` (a program of ever new shapes does not grow it for ever)
MAX_COSTS = 4096


class Placement(NamedTuple):
    """:func:`decide`'s answer: the call's kind (None: small, or no worker: not timed), its
    estimated seconds, and whether to queue it."""

    key: tuple[Any, ...] | None
    cost: float
    queue: bool


def elements(call: Call) -> int:
    """The elements of a call's array arguments and outputs (what its judgement reads)."""
    n = 0
    for a in (*call.args, *call.options["outputs"]):
        if hasattr(a, "size"):
            n += a.size
    return n


def decide(queue: Any, call: Call) -> Placement:
    """Where to judge ``call`` (an op :data:`HERE` does not list, whose emulation a worker
    has): ``queue`` is the watcher's :class:`fpemu.offload.Queue`, or None."""
    n = elements(call)
    if queue is None or n < SMALL or not queue.ready():
        return Placement(None, 0.0, False)
    key = (call.op, *(getattr(a, "shape", None) for a in call.args))
    cost = COSTS.get(key)
    if cost is None:
        cost = COST0 * n
    return Placement(key, cost, queue.backlog() < cost + MARGIN)


def learn(key: tuple[Any, ...], seconds: float) -> None:
    """A call of kind ``key`` took ``seconds`` to judge (half the old estimate, half this)."""
    old = COSTS.get(key)
    if old is None and len(COSTS) >= MAX_COSTS:
        COSTS.clear()
    COSTS[key] = seconds if old is None else 0.5 * (old + seconds)
