"""The watcher: a ``TorchDispatchMode`` that judges every ATen op torch runs, as it runs.

For each op the watcher converts torch's inputs to NumPy (copying those an in-place op is about
to overwrite), lets torch run the op, converts its outputs, and asks the op's emulation
(:mod:`fpemu.validate.ops`) for fpemu's result **from torch's own inputs**: every finding is
local to the op that made it. Where a worker process is ready, the judgements that cost more
than copying their operands go to a queue (:mod:`fpemu.offload`) and the step goes on; their
verdicts are put into the rows when the report is asked for or the block ends
(:meth:`Watcher.settle`): the same verdicts, made on the other core. Where the worker falls
far behind (a machine whose second core is busy), a judgement is made here instead, with no
copy (:mod:`.schedule`). It also notes where the
op ran: the training step, the phase
(``forward``, ``backward``: inside autograd's engine, ``optimizer``: inside ``optimizer.step``
or ``zero_grad``, ``scaler``: inside a ``GradScaler`` method) and the module (torch's
``ModuleTracker``, in the backward too).

Steps are counted from 0; a new step starts at the first forward op after an
``optimizer.step()`` or a ``GradScaler.update()`` (a step the scaler skipped still ends the step;
gradient-accumulation micro-batches belong to the step their optimizer step ends).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from fpemu.validate.ops import Call, builtin, lookup
from fpemu.validate.watch import layouts, schedule
from fpemu.validate.watch.convert import convert_args, dtype_name, tensor_dtypes, to_numpy
from fpemu.validate.watch.schema import outputs as op_outputs
from fpemu.validate.watch.schema import written_ids
from fpemu.validate.watch.verdict import ORDER, apply, judge_call, judge_view

__all__ = ["ORDER", "Watcher"]
#: namespaces whose ops are bookkeeping, not arithmetic (profiler ranges)
_SKIP_NS = ("profiler.",)
#: ATen ops that return no tensor and compute nothing to judge (reads of a value, sizes)
_SKIP = frozenset(
    {
        "aten._local_scalar_dense.default",
        "aten.sym_size.int",
        "aten.sym_numel.default",
        "aten.sym_stride.int",
        "aten.is_nonzero.default",
    }
)


_MISSING = "no emulation of this ATen op in fpemu"
#: ATen overload -> (its name, whether it is skipped, whether it is judged in the step's
#: thread even where a worker runs, whether it is a view): ``str`` of an overload formats it
#: anew each time
_INFO: dict[Any, tuple[str, bool, bool, bool]] = {}


def _info_of(func: Any) -> tuple[str, bool, bool, bool]:
    name = str(func)
    skip = name in _SKIP or name.startswith(_SKIP_NS)
    view = _is_view(func)
    return name, skip, view or name.split(".")[1] in schedule.HERE, view


#: random-number ops: their values come from torch's generator, there is nothing to recompute
_RANDOM = dict.fromkeys(
    (
        "randn",
        "rand",
        "randint",
        "randperm",
        "normal_",
        "uniform_",
        "bernoulli_",
        "bernoulli",
        "exponential_",
        "random_",
        "multinomial",
        "normal",
        "randn_like",
        "rand_like",
        "randint_like",
    ),
    "random numbers from torch's generator: not emulated (draw them outside the watched step)",
)


#: ops whose emulation needs the first tensor's whole storage and its offset (``as_strided``
#: places its view by an absolute storage offset): read before the op (``as_strided_`` moves it);
#: judged here, the storage being torch's memory (``as_strided`` as a view, ``as_strided_`` by
#: :data:`.schedule.HERE`)
_STORAGE = frozenset({"aten.as_strided.default", "aten.as_strided_.default"})


#: seconds between two moves of the queue between ops (each reads the worker's pipe: a system
#: call; the worker holds a few calls ahead, several hundred microseconds of work)
_PUMP_EVERY = 1e-4


def _is_view(func: Any) -> bool:
    """Whether an output of the ATen overload is a view of an input (its schema's alias
    annotation); asked once per overload (:data:`_INFO` keeps the answer)."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


def _capability() -> str:
    import torch  # noqa: PLC0415

    return str(torch.backends.cpu.get_cpu_capability()).lower()


class Watcher:
    """State of one ``watch`` block: the rows, the step and phase, and the hooks it installed.

    Not built directly: :func:`fpemu.validate.watch.watch` returns one.
    """

    def __init__(self, *, policy: Any = None, judge_views: bool = True) -> None:
        from fpemu.validate.watch.policy import PolicyCheck  # noqa: PLC0415
        from fpemu.validate.watch.procedure import Procedure  # noqa: PLC0415

        self.rows: list[dict[str, Any]] = []
        self.step = 0
        self.capability = _capability()
        self.policy = PolicyCheck(policy)
        self.procedure = Procedure()
        self.judge_views = judge_views
        self._phases: list[str] = []
        self._stepped = False
        self._tracker: Any = None
        # the tracker's parents at the last op, its module path, and when each module was last
        # seen entering (a counter)
        self._parents: set[str] = set()
        self._path = ""
        self._entered: dict[str, int] = {}
        self._clock = 0
        self._internal = 0
        self.keras_path: list[str] = []
        self.node: Any = None  # the autograd node running the current op (backward only)
        import torch  # noqa: PLC0415

        self._current_node = torch._C._current_autograd_node
        self._threads = torch.get_num_threads  # how torch splits rows: some sums depend on it
        # whether torch may run oneDNN kernels (torch.backends.mkldnn.enabled): GELU's differ
        self._mkldnn = torch._C._get_mkldnn_enabled
        self.seconds = 0.0
        self._queue: Any = None  # fpemu.offload.Queue while installed, where workers may run
        self._queued: list[tuple[dict[str, Any], tuple[Any, ...], int]] = []  # row, key, ticket
        self._pumped = 0.0  # when the queue was last moved along
        self.worker_judgements = 0  # judgements a worker process made (the rest: this one)

    # -- where an op runs -------------------------------------------------------------------
    def phase(self) -> str:
        """The phase of the op being dispatched now."""
        return self._phase_of(self._current_node())

    def _phase_of(self, node: Any) -> str:
        """``backward`` inside autograd's engine, else the innermost hooked phase."""
        if node is not None:
            return "backward"
        return self._phases[-1] if self._phases else "forward"

    def module(self) -> str:
        """The innermost module the tracker says is running, as a dotted path ("" for none)."""
        if self.keras_path:
            return ".".join(self.keras_path[1:])
        if self._tracker is None:
            return ""
        parents = self._tracker.parents
        if parents == self._parents:  # most ops: the same modules as the op before
            return self._path
        # the tracker's parents are a set: the innermost running module is the one entered
        # last (a module whose inputs need no gradient, an embedding, is never left in the
        # backward: it stays in the set, and a module entered after it is the one running);
        # those entered since the last op are ordered by depth, then name (deterministic: a
        # set's order changes with the process's string hashes)
        new = sorted(parents - self._parents, key=lambda p: (p.count("."), p))
        for p in new:
            self._entered[p] = self._clock
            self._clock += 1
        self._parents = set(parents)
        inner = max((p for p in parents if p != "Global"), key=self._entered.__getitem__,
                    default="")  # fmt: skip
        self._path = str(inner.partition(".")[2])
        return self._path

    @contextlib.contextmanager
    def in_phase(self, name: str) -> Iterator[None]:
        """Ops inside this block belong to phase ``name`` (used by the installed hooks)."""
        self._phases.append(name)
        try:
            yield
        finally:
            self._phases.pop()

    @property
    def current_step(self) -> int:
        """The step an event belongs to now (after ``optimizer.step()`` and before the next
        forward op, the next step)."""
        return self.step + int(self._stepped)

    def end_step(self) -> None:
        """An optimizer step (or a scaler update) finished: the next forward op starts a step."""
        self._stepped = True

    @contextlib.contextmanager
    def internal(self) -> Iterator[None]:
        """Ops inside this block are the watcher's own (its checks), not the program's."""
        self._internal += 1
        try:
            yield
        finally:
            self._internal -= 1

    # -- one op -----------------------------------------------------------------------------
    def dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``func`` for torch and judge its outputs (the dispatch mode's body)."""
        info = _INFO.get(func)
        if info is None:
            info = _INFO[func] = _info_of(func)
        name, skip, here, view = info
        if self._internal or skip:
            return func(*args, **kwargs)
        t0 = time.perf_counter()
        self.node = self._current_node()
        phase = self._phase_of(self.node)
        if phase == "forward" and self._stepped:
            self.step += 1
            self._stepped = False
        emulation = lookup(name)
        np_args = np_kwargs = ins = None
        storage = self._storage(args[0]) if name in _STORAGE and emulation is not None else None
        if emulation is not None and not view:  # a view's inputs are read after it ran
            np_args, np_kwargs, ins = convert_args(args, kwargs, written_ids(func, args, kwargs))
        t1 = time.perf_counter()
        result = func(*args, **kwargs)
        t2 = time.perf_counter()
        if self._queued and t2 - self._pumped > _PUMP_EVERY:
            self._pumped = t2
            self._queue.pump()
        outs = op_outputs(func, args, kwargs, result)
        if ins is None:
            ins = tensor_dtypes(args) + (tensor_dtypes(kwargs) if kwargs else [])
        row = self._row(name, phase, ins, outs)
        key = layout = None
        if emulation is not None and view and name not in _STORAGE:  # as_strided: in full
            key = layouts.key(name, emulation, args, kwargs)
            layout = layouts.of(args[0], outs) if key is not None else None
        if emulation is None:
            row.update(verdict="not_emulated", cause=_RANDOM.get(name.split(".")[1], _MISSING))
        elif layout is not None and layouts.seen(key, layout):
            # the same view of the same layout as one proved identical by the same-memory
            # proof: torch's outputs lie where the emulation's views lie, for any values
            row["n"] = sum(t.numel() for t in outs)
        else:
            if np_args is None:
                np_args, np_kwargs, _ = convert_args(args, kwargs)
            outputs = [to_numpy(t) for t in outs]
            call = Call(
                name,
                tuple(np_args or ()),
                dict(np_kwargs or {}),
                tuple(row["out_dtypes"]),
                capability=self.capability,
                options={
                    "outputs": outputs,
                    "num_threads": self._threads(),
                    "mkldnn": self._mkldnn(),
                },
            )
            if storage is not None:
                call.options["storage"] = storage
            # a view op is judged here and now (its output is torch's own memory, proved
            # equal without reading it), and so is plain elementwise arithmetic or a cast
            # (copying its operands for a worker costs more than judging them); the others go
            # to the queue when a worker runs it
            # (a worker process has fpemu's own emulations only: one registered or replaced
            # in this process is run here)
            if view:
                fields, by_layout = judge_view(call)
                apply(row, fields)
                if by_layout and layout is not None:
                    layouts.remember(key, layout)
            elif here or self._queue is None or not builtin(name):
                apply(row, judge_call(call))
            else:
                self._judge_or_queue(row, call)
        self.policy.check(row, name, args, kwargs, outs, self)
        self.procedure.op(row, name, args, kwargs, outs, self)
        self.rows.append(row)
        self.seconds += (time.perf_counter() - t2) + (t1 - t0)
        return result

    def _judge_or_queue(self, row: dict[str, Any], call: Call) -> None:
        """Judge ``call`` here, now, or queue it for the worker (:func:`.schedule.decide`)."""
        queue = self._queue
        where = schedule.decide(queue, call)
        if where.queue and where.key is not None:
            ticket = queue.submit(judge_call, call, cost=where.cost)
            self._queued.append((row, where.key, ticket))
            return
        if where.key is not None:
            queue.pump(ahead=where.cost + schedule.AHEAD)  # the worker's work meanwhile
        t0 = time.perf_counter()
        apply(row, judge_call(call))
        if where.key is not None:
            schedule.learn(where.key, time.perf_counter() - t0)

    def settle(self) -> None:
        """Put the verdicts of the queued judgements into their rows (waiting for them; the
        ones no worker has started run here)."""
        if not self._queued or self._queue is None:
            return
        t0 = time.perf_counter()
        fields = self._queue.results()
        seconds = self._queue.seconds
        for row, key, ticket in self._queued:
            apply(row, fields[ticket])
            schedule.learn(key, seconds[ticket])
        self._queued.clear()
        self.worker_judgements = self._queue.worker_calls
        self.seconds += time.perf_counter() - t0

    def _storage(self, t: Any) -> Any:
        """``(t``'s whole storage as a uint8 array (its memory, not a copy), ``t``'s storage
        offset)``, or None for an argument that is not a CPU tensor."""
        import torch  # noqa: PLC0415

        if not isinstance(t, torch.Tensor) or not t.is_cpu:
            return None
        with self.internal():  # the watcher's own op (set_), not the program's
            whole = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
        return whole.numpy(), t.storage_offset()

    def _row(self, name: str, phase: str, ins: list[str], outs: list[Any]) -> dict[str, Any]:
        node = self.node
        return {
            "step": self.step,
            "phase": phase,
            "module": self.module(),
            "op": name,
            "verdict": "identical",
            "cause": "",
            "node": node.name() if node is not None else "",
            "in_dtypes": ins,
            "out_dtypes": [dtype_name(t.dtype) for t in outs],
            "shape": list(outs[0].shape) if outs else [],
            "n": 0,
            "ndiff": 0,
            "ulps": 0.0,
        }

    # -- install / remove -------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator[Watcher]:
        """Install the dispatch mode, the module tracker and the phase hooks for the block."""
        from torch.utils.module_tracker import ModuleTracker  # noqa: PLC0415

        from fpemu.offload import Queue  # noqa: PLC0415
        from fpemu.parallel import numpy_blas_threads  # noqa: PLC0415
        from fpemu.validate.watch.hooks import phase_hooks  # noqa: PLC0415
        from fpemu.validate.watch.mode import WatchMode  # noqa: PLC0415

        self._tracker = ModuleTracker()
        self._queue = Queue()
        try:
            with numpy_blas_threads(1), self._tracker, phase_hooks(self), WatchMode(self):
                yield self
        finally:
            try:  # also when the program raised: no row may keep a verdict it was not given
                self.settle()
            finally:
                self._queue.close()
                self._queue = None
        self.procedure.finish(self)
