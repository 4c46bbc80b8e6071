"""The real tensor-core instructions: PTX ``mma.sync`` kernels for CuPy, and GPU detection.

One warp computes one small ``D = A @ B + C`` problem by issuing the MMA instruction itself
(research note ``tensorcore.md`` section 5), so the order of the k blocks is known and the result
can be compared bit for bit with :mod:`fpemu.tensorcore`. Operands travel as raw bit patterns
(uint16 for fp16/bf16, uint32 for tf32 and fp32) and the kernel only moves bits, never rounds.

The kernel source is generated from :data:`INSTRUCTIONS`, whose fragment layouts (which lane
holds which matrix element, from the PTX ISA "Matrix fragments for mma.m16n8k16 / m16n8k8")
are plain data, checked on the CPU by ``tests/test_hardware.py``. CuPy is imported only by
:func:`run_mma`, so this module imports without a GPU.

Status: written from the PTX ISA facts in the research note; the tests compile it with
``nvcc`` for sm_75/sm_80/sm_90 and run its addressing on the CPU (``g++``, the ``asm``
replaced by a recorder) where those compilers exist. Not yet run on a GPU in this repository.

>>> INSTRUCTIONS["bf16"].ptx
'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32'
>>> model_for_capability(9, 0)
'h100'
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: Element coordinates (row, column) as C/Python expressions in ``g = lane >> 2``, ``t = lane & 3``.
Coord = tuple[str, str]
#: Per register, the elements it holds, low half first (one element for 32-bit operands).
Fragment = tuple[tuple[Coord, ...], ...]

_M, _N = 16, 8

# m16n8k16 with 16-bit A/B (PTX ISA "mma.m16n8k16, .f16/.bf16"): two elements per register.
_A_K16: Fragment = (
    (("g", "2*t"), ("g", "2*t+1")),
    (("g+8", "2*t"), ("g+8", "2*t+1")),
    (("g", "2*t+8"), ("g", "2*t+9")),
    (("g+8", "2*t+8"), ("g+8", "2*t+9")),
)
_B_K16: Fragment = ((("2*t", "g"), ("2*t+1", "g")), (("2*t+8", "g"), ("2*t+9", "g")))
# m16n8k8 with 16-bit A/B (sm_75's HMMA.1688).
_A_K8_16: Fragment = ((("g", "2*t"), ("g", "2*t+1")), (("g+8", "2*t"), ("g+8", "2*t+1")))
_B_K8_16: Fragment = ((("2*t", "g"), ("2*t+1", "g")),)
# m16n8k8 with tf32 A/B: one 32-bit element per register.
_A_K8_TF32: Fragment = ((("g", "t"),), (("g+8", "t"),), (("g", "t+4"),), (("g+8", "t+4"),))
_B_K8_TF32: Fragment = ((("t", "g"),), (("t+4", "g"),))
# C/D: four f32 registers, or two f16x2 registers holding the same elements.
_C_F32: Fragment = ((("g", "2*t"),), (("g", "2*t+1"),), (("g+8", "2*t"),), (("g+8", "2*t+1"),))
_C_F16: Fragment = ((("g", "2*t"), ("g", "2*t+1")), (("g+8", "2*t"), ("g+8", "2*t+1")))


@dataclass(frozen=True)
class Instruction:
    """One warp-level MMA instruction ``D(16 x 8) = A(16 x k) @ B(k x 8) + C``.

    Attributes:
        name: short key (``"fp16"``, ``"bf16"``, ``"fp16_acc16"``, ``"tf32"``, ``"fp16_k8"``).
        ptx: the full PTX opcode issued.
        fmt: fpemu name of the A/B format.
        acc: fpemu name of the C/D format.
        k: the instruction's K.
        min_sm: oldest compute capability (major * 10 + minor) that has it.
        a, b, c: fragment layouts of A, B and C/D.
    """

    name: str
    ptx: str
    fmt: str
    acc: str
    k: int
    min_sm: int
    a: Fragment
    b: Fragment
    c: Fragment

    @property
    def operand_bits(self) -> int:
        """Width of one A/B element in memory: 16, or 32 for tf32 (an FP32 word)."""
        return 32 if self.fmt == "tf32" else 16

    @property
    def acc_bits(self) -> int:
        """Width of one C/D element: 32 (FP32) or 16 (FP16 accumulate)."""
        return 16 if self.acc == "float16" else 32

    @property
    def kernel_name(self) -> str:
        """Name of the ``extern "C"`` kernel in :func:`kernel_source`."""
        return f"fpemu_mma_{self.name}"


#: The instructions the harness can issue, by short name.
INSTRUCTIONS: dict[str, Instruction] = {
    i.name: i
    for i in (
        Instruction("fp16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                    "float16", "float32", 16, 80, _A_K16, _B_K16, _C_F32),
        Instruction("bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                    "bfloat16", "float32", 16, 80, _A_K16, _B_K16, _C_F32),
        Instruction("fp16_acc16", "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
                    "float16", "float16", 16, 80, _A_K16, _B_K16, _C_F16),
        Instruction("tf32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                    "tf32", "float32", 8, 80, _A_K8_TF32, _B_K8_TF32, _C_F32),
        Instruction("fp16_k8", "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
                    "float16", "float32", 8, 75, _A_K8_16, _B_K8_16, _C_F32),
    )
}  # fmt: skip

#: Compute capability -> fpemu tensor-core model (see :mod:`fpemu.tensorcore.arch`).
CAPABILITY_MODELS: dict[tuple[int, int], str] = {
    (7, 0): "v100", (7, 2): "v100",
    (7, 5): "t4",
    (8, 0): "a100", (8, 6): "a100", (8, 7): "a100",  # GA10x: same fp16/bf16/tf32 model as ada
    (8, 9): "ada",
    (9, 0): "h100",
    (10, 0): "b200", (10, 3): "b200", (12, 0): "b200", (12, 1): "b200",
}  # fmt: skip


def model_for_capability(major: int, minor: int) -> str:
    """The fpemu tensor-core model of a GPU of compute capability ``major.minor``.

    Raises:
        ValueError: a capability with no model (the message lists the known ones).

    >>> model_for_capability(8, 9), model_for_capability(10, 0)
    ('ada', 'b200')
    """
    key = (int(major), int(minor))
    if key not in CAPABILITY_MODELS:
        known = ", ".join(f"{a}.{b}" for a, b in CAPABILITY_MODELS)
        raise ValueError(
            f"no tensor-core model for compute capability {major}.{minor}; known: {known}; "
            "pass an explicit model name"
        )
    return CAPABILITY_MODELS[key]


def supported(instr: Instruction, sm: int) -> bool:
    """Whether a GPU with compute capability ``sm`` (e.g. 86) has ``instr``.

    >>> supported(INSTRUCTIONS["bf16"], 75), supported(INSTRUCTIONS["fp16_k8"], 75)
    (False, True)
    """
    return sm >= instr.min_sm


def _pack16(elems: tuple[Coord, ...], src: str, stride: str) -> str:
    lo, hi = (f"(unsigned){src}[({r})*{stride} + ({c})]" for r, c in elems)
    return f"({lo} | ({hi} << 16))"


def _element(src: str, stride: str, coord: Coord) -> str:
    r, c = coord
    return f"{src}[({r})*{stride} + ({c})]"


def kernel_source(instr: Instruction) -> str:
    """CUDA C++ source of the kernel issuing ``instr``: one problem per warp.

    Arguments of the kernel: ``A`` (P, 16, K) and ``B`` (P, K, 8) row-major raw operand bits,
    ``C`` and ``D`` (P, 16, 8) raw accumulator bits, ``ksteps`` (K = ksteps * instr.k) and
    ``problems`` (P). Each warp loads C, issues ``ksteps`` instructions in increasing k, stores
    D. No arithmetic touches the values: f32 registers are filled by bit moves
    (``__uint_as_float``), and nothing is compiled with fast-math.

    >>> "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in kernel_source(INSTRUCTIONS["tf32"])
    True
    """
    op_t = "unsigned int" if instr.operand_bits == 32 else "unsigned short"
    acc_t = "unsigned int" if instr.acc_bits == 32 else "unsigned short"
    lines = [
        f'extern "C" __global__ void {instr.kernel_name}(',
        f"    const {op_t}* __restrict__ A, const {op_t}* __restrict__ B,",
        f"    const {acc_t}* __restrict__ C, {acc_t}* __restrict__ D, int ksteps, int problems) {{",
        "  const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;",
        "  if (warp >= problems) return;  // whole warps leave together: mma.sync needs all 32",
        "  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;",
        f"  const long long K = (long long){instr.k} * ksteps;",
        f"  const {op_t}* a = A + warp * {_M} * K;",
        f"  const {op_t}* b = B + warp * K * {_N};",
        f"  const {acc_t}* c = C + warp * {_M * _N};",
        f"  {acc_t}* d = D + warp * {_M * _N};",
    ]
    # Accumulator registers, loaded from raw bits.
    nc = len(instr.c)
    if instr.acc_bits == 32:
        for i, (coord,) in enumerate(instr.c):
            lines.append(f"  float d{i} = __uint_as_float({_element('c', str(_N), coord)});")
    else:
        for i, elems in enumerate(instr.c):
            lines.append(f"  unsigned d{i} = {_pack16(elems, 'c', str(_N))};")
    lines += [
        "  for (int s = 0; s < ksteps; ++s) {",
        f"    const {op_t}* as = a + {instr.k} * s;",
        f"    const {op_t}* bs = b + (long long){instr.k} * s * {_N};",
    ]
    for name, frag, src, stride in (("a", instr.a, "as", "K"), ("b", instr.b, "bs", str(_N))):
        for i, elems in enumerate(frag):
            val = (
                _pack16(elems, src, stride) if len(elems) == 2 else _element(src, stride, elems[0])
            )
            lines.append(f"    unsigned {name}{i} = {val};")
    na, nb = len(instr.a), len(instr.b)
    d_ops = ", ".join(f"%{i}" for i in range(nc))
    a_ops = ", ".join(f"%{nc + i}" for i in range(na))
    b_ops = ", ".join(f"%{nc + na + i}" for i in range(nb))
    cons = "f" if instr.acc_bits == 32 else "r"
    outs = ", ".join(f'"+{cons}"(d{i})' for i in range(nc))
    ins = ", ".join([f'"r"(a{i})' for i in range(na)] + [f'"r"(b{i})' for i in range(nb)])
    lines += [
        f'    asm volatile("{instr.ptx} "',
        f'                 "{{{d_ops}}}, {{{a_ops}}}, {{{b_ops}}}, {{{d_ops}}};"',
        f"                 : {outs}",
        f"                 : {ins});",
        "  }",
    ]
    if instr.acc_bits == 32:
        for i, (coord,) in enumerate(instr.c):
            lines.append(f"  {_element('d', str(_N), coord)} = __float_as_uint(d{i});")
    else:
        for i, (lo, hi) in enumerate(instr.c):
            lines.append(f"  {_element('d', str(_N), lo)} = (unsigned short)(d{i} & 0xFFFFu);")
            lines.append(f"  {_element('d', str(_N), hi)} = (unsigned short)(d{i} >> 16);")
    lines.append("}")
    return "\n".join(lines) + "\n"


def fragment_owners(frag: Fragment, rows: int, cols: int) -> NDArray[np.int64]:
    """For each element of a ``rows x cols`` operand, how many (lane, register, half) hold it.

    A correct layout gives exactly one everywhere; this evaluates the same expressions that
    :func:`kernel_source` pastes into the CUDA code.

    >>> int(fragment_owners(INSTRUCTIONS["fp16"].a, 16, 16).min())
    1
    """
    count = np.zeros((rows, cols), dtype=np.int64)
    for lane in range(32):
        env = {"g": lane >> 2, "t": lane & 3}
        for elems in frag:
            for r, c in elems:
                count[eval(r, {}, env), eval(c, {}, env)] += 1  # our own table: expressions in g, t
    return count


@functools.lru_cache(maxsize=16)
def _kernel(name: str) -> Any:
    import cupy  # noqa: PLC0415 - only here: the rest of fpemu never needs CuPy

    instr = INSTRUCTIONS[name]
    return cupy.RawKernel(kernel_source(instr), instr.kernel_name, options=("--std=c++14",))


def run_mma(
    instr: Instruction,
    a_bits: NDArray[Any],
    b_bits: NDArray[Any],
    c_bits: NDArray[Any],
    *,
    warps_per_block: int = 4,
) -> NDArray[Any]:
    """Run ``instr`` on the current GPU for P problems and return D's raw bits (NumPy).

    Args:
        instr: the instruction.
        a_bits: (P, 16, K) operand bits (uint16, or uint32 for tf32), K a multiple of instr.k.
        b_bits: (P, K, 8) operand bits.
        c_bits: (P, 16, 8) accumulator bits (uint32 for FP32, uint16 for FP16).
        warps_per_block: warps (problems) per CUDA block.

    Returns:
        (P, 16, 8) raw result bits, same dtype as ``c_bits``.

    Raises:
        ValueError: shapes or dtypes do not fit ``instr``.
        ImportError: CuPy is not installed.
    """
    op_dt = np.dtype(np.uint32 if instr.operand_bits == 32 else np.uint16)
    acc_dt = np.dtype(np.uint32 if instr.acc_bits == 32 else np.uint16)
    check_operands(instr, a_bits, b_bits, c_bits)
    import cupy  # noqa: PLC0415

    P, _, K = a_bits.shape
    a = cupy.asarray(np.ascontiguousarray(a_bits, dtype=op_dt))
    b = cupy.asarray(np.ascontiguousarray(b_bits, dtype=op_dt))
    c = cupy.asarray(np.ascontiguousarray(c_bits, dtype=acc_dt))
    d = cupy.empty_like(c)
    threads = 32 * warps_per_block
    blocks = (P + warps_per_block - 1) // warps_per_block
    _kernel(instr.name)((blocks,), (threads,), (a, b, c, d, np.int32(K // instr.k), np.int32(P)))
    return np.asarray(cupy.asnumpy(d))


def check_operands(
    instr: Instruction, a_bits: NDArray[Any], b_bits: NDArray[Any], c_bits: NDArray[Any]
) -> None:
    """Validate shapes and dtypes of raw operands for ``instr``.

    Raises:
        ValueError: a shape or dtype that does not fit (the message names the argument).
    """
    op_dt = np.dtype(np.uint32 if instr.operand_bits == 32 else np.uint16)
    acc_dt = np.dtype(np.uint32 if instr.acc_bits == 32 else np.uint16)
    for arg, x, dt in (("a_bits", a_bits, op_dt), ("b_bits", b_bits, op_dt),
                       ("c_bits", c_bits, acc_dt)):  # fmt: skip
        if x.dtype != dt or x.ndim != 3:
            raise ValueError(
                f"{arg} must be a 3-d {dt} array for {instr.name}, got {x.dtype} of shape {x.shape}"
            )
    P, M, K = a_bits.shape
    if M != _M or K == 0 or K % instr.k:
        raise ValueError(f"a_bits.shape={a_bits.shape}: expected (P, 16, a multiple of {instr.k})")
    if b_bits.shape != (P, K, _N):
        raise ValueError(f"b_bits.shape={b_bits.shape}: expected {(P, K, _N)}")
    if c_bits.shape != (P, _M, _N):
        raise ValueError(f"c_bits.shape={c_bits.shape}: expected {(P, _M, _N)}")
    if P >= 2**31:
        raise ValueError(f"too many problems in one launch: {P}")


def device_capability(cupy: Any) -> tuple[int, int]:
    """Compute capability ``(major, minor)`` of CuPy's current device."""
    cc = str(cupy.cuda.Device().compute_capability)  # e.g. "90"
    return int(cc[:-1]), int(cc[-1])


def device_name(cupy: Any) -> str:
    """Marketing name of CuPy's current device (e.g. ``"NVIDIA H100 80GB HBM3"``)."""
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
