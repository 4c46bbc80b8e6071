"""The tensor-core hardware harness, on the CPU: layouts, kernel source, words, generators,
the comparison engine and the CLI (with a CPU stand-in for the GPU)."""

from __future__ import annotations

import argparse
import ctypes
import io
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from rich.console import Console

import fpemu
from fpemu.cli import crosscheck as cli
from fpemu.formats import get_format
from fpemu.tensorcore import ARCHS
from fpemu.tensorcore.hardware.crosscheck import crosscheck, emulate_words, save_mismatches
from fpemu.tensorcore.hardware.generators import GENERATORS, Cases, generate, safe_exponent, values
from fpemu.tensorcore.hardware.mma import (
    CAPABILITY_MODELS,
    INSTRUCTIONS,
    Instruction,
    check_operands,
    fragment_owners,
    kernel_source,
    model_for_capability,
    supported,
)
from fpemu.tensorcore.hardware.words import from_words, same_words, to_words

RNG = np.random.default_rng(20261121)
PAIRS = sorted({(i.fmt, i.acc) for i in INSTRUCTIONS.values()})


# ----------------------------------------------------------------------------- layouts, kernel
@pytest.mark.parametrize("name", list(INSTRUCTIONS))
def test_fragments_cover_each_element_once(name: str) -> None:
    i = INSTRUCTIONS[name]
    for frag, rows, cols in ((i.a, 16, i.k), (i.b, i.k, 8), (i.c, 16, 8)):
        assert (fragment_owners(frag, rows, cols) == 1).all()
    # Registers hold 32 bits: two 16-bit elements (or one tf32/f32 word).
    assert all(len(r) == 32 // i.operand_bits for r in (*i.a, *i.b))
    assert all(len(r) == 32 // i.acc_bits for r in i.c)


@pytest.mark.parametrize("name", list(INSTRUCTIONS))
def test_packed_pairs_put_the_lower_index_in_the_low_half(name: str) -> None:
    i = INSTRUCTIONS[name]
    for lane in range(32):
        env = {"g": lane >> 2, "t": lane & 3}
        for frag, along in ((i.a, 1), (i.b, 0), (i.c, 1)):  # A, C: columns; B: rows (k)
            for reg in frag:
                if len(reg) == 2:
                    lo, hi = ([eval(x, {}, env) for x in e] for e in reg)
                    assert hi[along] == lo[along] + 1 and hi[1 - along] == lo[1 - along]


def test_kernel_source_issues_the_instruction_once_per_k_step() -> None:
    for i in INSTRUCTIONS.values():
        src = kernel_source(i)
        assert src.count(i.ptx) == 1 and f"void {i.kernel_name}(" in src
        assert "for (int s = 0; s < ksteps; ++s)" in src
        assert "__uint_as_float" in src if i.acc_bits == 32 else "__uint_as_float" not in src


def _nvcc(tmp_path: Path, names: list[str], sm: int, kind: str) -> tuple[int, str, Path]:
    src = tmp_path / f"k{sm}.cu"
    src.write_text("".join(kernel_source(INSTRUCTIONS[n]) for n in names))
    out = tmp_path / f"k{sm}.{kind}"
    r = subprocess.run(
        ["nvcc", f"-arch=sm_{sm}", f"-{kind}", "-o", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return r.returncode, r.stderr, out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("sm", [75, 80, 90])
def test_kernels_compile_with_nvcc_and_ptxas(sm: int, tmp_path: Path) -> None:
    """ptxas checks each mma's operand count and register types for the target architecture."""
    names = [n for n, i in INSTRUCTIONS.items() if supported(i, sm)]
    rc, err, ptx = _nvcc(tmp_path, names, sm, "ptx")
    assert rc == 0, err
    text = ptx.read_text()
    assert all(INSTRUCTIONS[n].ptx in text for n in names)
    rc, err, _ = _nvcc(tmp_path, names, sm, "cubin")
    assert rc == 0, err


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) not installed")
def test_ptxas_rejects_sm80_instructions_for_sm75(tmp_path: Path) -> None:
    """min_sm is right: the m16n8k16 (and bf16/tf32) forms do not exist on Turing."""
    for name in ("fp16", "bf16", "tf32"):
        rc, err, _ = _nvcc(tmp_path, [name], 75, "cubin")
        assert rc != 0 and "requires .target sm_80" in err


# The generated kernel, executed on the CPU: the asm statement is replaced by a call that
# records the A/B registers of every lane and k step, so the addressing (strides, k offsets,
# packing order, one problem per warp, surplus warps leaving early) is checked, and C -> D
# must come back bit for bit. What the tensor core does with the registers needs a GPU.
_CPU_PRELUDE = r"""
#include <cstring>
#include <initializer_list>
struct Idx { unsigned x; };
static Idx blockIdx, blockDim, threadIdx;
#define __global__
#define __restrict__
static float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static unsigned* REC; static int KSTEPS;
static void fpemu_record(long long warp, int lane, int s, std::initializer_list<unsigned> regs) {
  unsigned* r = REC + ((warp * KSTEPS + s) * 32 + lane) * 8;
  int i = 0;
  for (unsigned v : regs) r[i++] = v;
}
"""


def _cpu_source(i: Instruction) -> str:
    regs = ", ".join([f"a{j}" for j in range(len(i.a))] + [f"b{j}" for j in range(len(i.b))])
    src, n = re.subn(r"asm volatile\(.*?\);", f"fpemu_record(warp, lane, s, {{{regs}}});",
                     kernel_source(i), flags=re.S)  # fmt: skip
    assert n == 1
    op = "unsigned int" if i.operand_bits == 32 else "unsigned short"
    acc = "unsigned int" if i.acc_bits == 32 else "unsigned short"
    return (
        src.replace('extern "C" __global__ void', "static void")
        + f"""
extern "C" void run_{i.name}(const {op}* A, const {op}* B, const {acc}* C, {acc}* D,
                    int ksteps, int problems, int blocks, int threads, unsigned* rec) {{
  REC = rec; KSTEPS = ksteps; blockDim.x = threads;
  for (unsigned bx = 0; bx < (unsigned)blocks; ++bx)
    for (unsigned tx = 0; tx < (unsigned)threads; ++tx) {{
      blockIdx.x = bx; threadIdx.x = tx;
      {i.kernel_name}(A, B, C, D, ksteps, problems);
    }}
}}
"""
    )


@pytest.fixture(scope="module")
def cpu_kernels(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: cannot run the generated kernels on the CPU")
    d = tmp_path_factory.mktemp("cpu_kernels")
    src = d / "kernels.cpp"
    src.write_text(_CPU_PRELUDE + "".join(_cpu_source(i) for i in INSTRUCTIONS.values()))
    r = subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(d / "k.so"), str(src)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(d / "k.so"))


def _expected_registers(i: Instruction, a: np.ndarray, b: np.ndarray, ksteps: int) -> np.ndarray:
    P = a.shape[0]
    out = np.zeros((P, ksteps, 32, 8), np.uint32)
    for lane in range(32):
        env = {"g": lane >> 2, "t": lane & 3}
        regs = [("a", e) for e in i.a] + [("b", e) for e in i.b]
        for j, (which, elems) in enumerate(regs):
            word = np.zeros((P, ksteps), np.uint32)
            for h, (r, c) in enumerate(elems):
                rr, cc = eval(r, {}, env), eval(c, {}, env)
                for s in range(ksteps):
                    v = a[:, rr, s * i.k + cc] if which == "a" else b[:, s * i.k + rr, cc]
                    word[:, s] |= v.astype(np.uint32) << np.uint32(16 * h)
            out[:, :, lane, j] = word
    return out


@pytest.mark.parametrize("name", list(INSTRUCTIONS))
@pytest.mark.parametrize("ksteps", [1, 3])
def test_generated_kernel_addressing_on_the_cpu(
    cpu_kernels: ctypes.CDLL, name: str, ksteps: int
) -> None:
    i = INSTRUCTIONS[name]
    op = np.uint32 if i.operand_bits == 32 else np.uint16
    acc = np.uint32 if i.acc_bits == 32 else np.uint16
    P, K = 6, i.k * ksteps  # 2 blocks of 4 warps: the last 2 warps have no problem
    a = RNG.integers(0, np.iinfo(op).max, (P, 16, K), dtype=np.uint64).astype(op)
    b = RNG.integers(0, np.iinfo(op).max, (P, K, 8), dtype=np.uint64).astype(op)
    c = RNG.integers(0, np.iinfo(acc).max, (P, 16, 8), dtype=np.uint64).astype(acc)
    d = np.full((P + 2, 16, 8), 0xABCD, dtype=acc)  # room for surplus warps: must stay untouched
    rec = np.zeros((P + 2, ksteps, 32, 8), np.uint32)
    ptr = ctypes.c_void_p
    getattr(cpu_kernels, f"run_{name}")(
        ptr(a.ctypes.data), ptr(b.ctypes.data), ptr(c.ctypes.data), ptr(d.ctypes.data),
        ctypes.c_int(ksteps), ctypes.c_int(P), ctypes.c_int(2), ctypes.c_int(128),
        ptr(rec.ctypes.data),
    )  # fmt: skip
    assert np.array_equal(d[:P], c) and (d[P:] == 0xABCD).all()
    assert np.array_equal(rec[:P], _expected_registers(i, a, b, ksteps))
    assert not rec[P:].any()


def test_capability_table_names_existing_models() -> None:
    assert set(CAPABILITY_MODELS.values()) <= set(ARCHS)
    assert [model_for_capability(*cc) for cc in ((7, 0), (7, 5), (8, 0), (8, 9), (9, 0), (10, 0))] \
        == ["v100", "t4", "a100", "ada", "h100", "b200"]  # fmt: skip
    with pytest.raises(ValueError, match=r"compute capability 6\.1"):
        model_for_capability(6, 1)


def test_supported_by_compute_capability() -> None:
    assert [n for n, i in INSTRUCTIONS.items() if supported(i, 75)] == ["fp16_k8"]
    assert all(supported(i, 90) for i in INSTRUCTIONS.values())


def test_check_operands_names_the_bad_argument() -> None:
    i = INSTRUCTIONS["fp16"]
    a, b = np.zeros((2, 16, 16), np.uint16), np.zeros((2, 16, 8), np.uint16)
    c = np.zeros((2, 16, 8), np.uint32)
    check_operands(i, a, b, c)
    with pytest.raises(ValueError, match="a_bits must be a 3-d uint16"):
        check_operands(i, a.astype(np.uint32), b, c)
    with pytest.raises(ValueError, match="c_bits must be a 3-d uint32"):
        check_operands(i, a, b, c.astype(np.uint16))
    with pytest.raises(ValueError, match=r"b_bits.shape=\(2, 8, 8\)"):
        check_operands(i, a, b[:, :8], c)
    with pytest.raises(ValueError, match="a multiple of 16"):
        check_operands(i, a[:, :, :8], b[:, :8], c)


# ----------------------------------------------------------------------------- words
def test_fp16_words_of_every_pattern_match_numpy_and_fpemu_encode() -> None:
    w = np.arange(2**16, dtype=np.uint16)
    x = from_words(w, "float16")
    ok = ~np.isnan(x)
    assert np.array_equal(
        x[ok].view(np.uint64), w.view(np.float16)[ok].astype(np.float64).view(np.uint64)
    )
    assert np.array_equal(to_words(x[ok], "float16"), w[ok])
    assert np.array_equal(to_words(x[ok], "float16"), fpemu.encode(x[ok], "fp16"))


def test_bf16_words_of_every_pattern_match_ml_dtypes() -> None:
    w = np.arange(2**16, dtype=np.uint16)
    x = from_words(w, "bfloat16")
    with np.errstate(invalid="ignore"):
        theirs = w.view(ml_dtypes.bfloat16).astype(np.float64)
    ok = ~np.isnan(theirs)
    assert np.array_equal(np.isnan(x), ~ok)
    assert np.array_equal(x[ok].view(np.uint64), theirs[ok].view(np.uint64))
    assert np.array_equal(to_words(x[ok], "bfloat16"), w[ok])


def test_tf32_words_ignore_the_low_13_bits_and_round_trip() -> None:
    w = RNG.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32)
    x = from_words(w, "tf32")
    kept = w & np.uint32(0xFFFFE000)
    fin = np.isfinite(x)
    assert np.array_equal(x[fin], kept.view(np.float32)[fin].astype(np.float64))
    assert np.array_equal(to_words(x[fin], "tf32"), kept[fin])
    assert np.array_equal(
        to_words(x[fin], "tf32"), fpemu.encode(x[fin], "tf32").astype(np.uint32) << 13
    )


def test_words_reject_inexact_values_and_wrong_dtypes() -> None:
    with pytest.raises(ValueError, match="not exact in bfloat16"):
        to_words(np.array([1.0 + 2.0**-10]), "bf16")
    with pytest.raises(ValueError, match="has no MMA word; accepted"):
        to_words(np.array([1.0]), "e4m3")
    with pytest.raises(TypeError, match="must be uint16 words for float16"):
        from_words(np.array([1], dtype=np.uint32), "fp16")


def test_same_words_treats_nans_as_equal_and_signed_zeros_as_different() -> None:
    x = np.array([0x7FC00000, 0x7FFFFFFF, 0x80000000, 0x3F800000], np.uint32)
    y = np.array([0x7FFFFFFF, 0xFFC00000, 0x00000000, 0x3F800000], np.uint32)
    assert same_words(x, y, "float32").tolist() == [True, True, False, True]


# ----------------------------------------------------------------------------- generators
def _exact(x: np.ndarray, fmt: str) -> bool:
    """Exactness checked with third-party casts, not with fpemu."""
    x = x[~np.isnan(x)]
    if fmt == "float16":
        with np.errstate(over="ignore"):
            return bool((x.astype(np.float16).astype(np.float64) == x).all())
    if fmt == "bfloat16":
        return bool((x.astype(ml_dtypes.bfloat16).astype(np.float64) == x).all())
    x32 = x.astype(np.float32)
    fits = bool((x32.astype(np.float64) == x).all())
    if fmt == "tf32":
        fits = fits and bool(((x32.view(np.uint32) & np.uint32(0x1FFF)) == 0).all())
    return fits


def _exact_results(cs: Cases) -> np.ndarray:
    """Exact A @ B + C per element via math.fsum of the (float64-exact) products."""
    out = np.empty(cs.c.shape)
    for p, m, n in np.ndindex(*cs.c.shape):
        terms = [*(cs.a[p, m, :] * cs.b[p, :, n]), cs.c[p, m, n]]
        out[p, m, n] = math.fsum(terms)
    return out


@pytest.mark.parametrize("gen", list(GENERATORS))
@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_generators_make_exact_inputs_of_the_right_shape(gen: str, fmt: str, acc: str) -> None:
    for k in (8, 32):
        cs = generate(gen, problems=40, fmt=fmt, acc=acc, k=k, rng=np.random.default_rng(1))
        assert (cs.a.shape, cs.b.shape, cs.c.shape) == ((40, 16, k), (40, k, 8), (40, 16, 8))
        assert _exact(cs.a, fmt) and _exact(cs.b, fmt) and _exact(cs.c, acc)
        again = generate(gen, problems=40, fmt=fmt, acc=acc, k=k, rng=np.random.default_rng(1))
        assert all(np.array_equal(x, y, equal_nan=True) for x, y in
                   ((cs.a, again.a), (cs.b, again.b), (cs.c, again.c)))  # fmt: skip


def _gen(name: str, fmt: str, acc: str, problems: int = 64, k: int = 16) -> Cases:
    return generate(name, problems=problems, fmt=fmt, acc=acc, k=k, rng=np.random.default_rng(7))


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_integers_are_small_so_every_model_is_exact(fmt: str, acc: str) -> None:
    cs = _gen("integers", fmt, acc)
    for x, bound in ((cs.a, 3), (cs.b, 3), (cs.c, 64)):
        assert (x == np.round(x)).all() and np.abs(x).max() <= bound and len(np.unique(x)) > 5
    assert np.abs(_exact_results(cs)).max() < 2**11  # exact in fp16 and in FP32


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_uniform_is_in_unit_interval_and_spread(fmt: str, acc: str) -> None:
    cs = _gen("uniform", fmt, acc)
    for x in (cs.a, cs.b, cs.c):
        assert np.abs(x).max() <= 1 and x.min() < -0.9 and x.max() > 0.9


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_wide_spans_the_exponent_range_without_overflow(fmt: str, acc: str) -> None:
    f, af = get_format(fmt), get_format(acc)
    cs = _gen("wide", fmt, acc, problems=200)
    top = safe_exponent(f, af, 16)
    for x in (cs.a, cs.b):
        e = np.frexp(np.abs(x))[1] - 1
        assert (x != 0).all() and e.min() == f.emin and e.max() == top
    assert np.isfinite(_exact_results(cs)).all()
    assert np.abs(_exact_results(cs)).max() <= af.max


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_cancellation_leaves_a_tiny_fraction_of_the_terms(fmt: str, acc: str) -> None:
    f, af = get_format(fmt), get_format(acc)
    cs = _gen("cancellation", fmt, acc, problems=32)
    exact = _exact_results(Cases(cs.a, cs.b, np.zeros_like(cs.c)))  # sum of products only
    mass = np.abs(cs.a)[:, :, :, None] * np.abs(cs.b)[:, None, :, :]
    mass = mass.sum(axis=2)
    even = np.abs(exact[0::2]) <= 2.0 ** (1 - f.mbits) * mass[0::2]
    assert even.all()
    total = np.abs(exact[1::2] + cs.c[1::2])  # odd problems: C = -(sum), rounded
    assert (total <= 2.0 ** (1 - af.mbits) * mass[1::2]).all()
    assert (mass > 0).all() and (cs.c[1::2] != 0).mean() > 0.9


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_subnormal_inputs_and_results(fmt: str, acc: str) -> None:
    f, af = get_format(fmt), get_format(acc)
    cs = _gen("subnormal", fmt, acc)
    sub_a = (np.abs(cs.a) < f.tiny) & (cs.a != 0)
    assert 0.3 < sub_a.mean() < 0.7
    assert ((np.abs(cs.c) < af.tiny) & (cs.c != 0)).mean() > 0.2
    tiny = (np.abs(_exact_results(cs)) < af.tiny) & (_exact_results(cs) != 0)
    if not (fmt == "float16" and acc == "float32"):  # fp16 products cannot reach 2**-126
        assert tiny.mean() > 0.03


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_zeros_have_both_signs_and_an_all_negative_zero_output(fmt: str, acc: str) -> None:
    cs = _gen("zeros", fmt, acc)
    for x in (cs.a, cs.b, cs.c):
        z = x == 0
        assert 0.3 < z.mean() < 0.8 and np.signbit(x[z]).any() and (~np.signbit(x[z])).any()
    assert (cs.a[:, 0, :] == 0).all() and np.signbit(cs.a[:, 0, :]).all()
    assert not np.signbit(cs.b[:, :, 0]).any()
    assert (cs.c[:, 0, 0] == 0).all() and np.signbit(cs.c[:, 0, 0]).all()
    prods = cs.a[:, 0, :] * cs.b[:, :, 0]
    assert ((prods == 0) & np.signbit(prods)).all()  # every product is -0: IEEE sum is -0


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_specials_put_inf_and_nan_in_every_operand(fmt: str, acc: str) -> None:
    cs = _gen("specials", fmt, acc, problems=200)
    for x in (cs.a, cs.b, cs.c):
        assert np.isnan(x).any() and (x == np.inf).any() and (x == -np.inf).any()
        assert 0.002 < (~np.isfinite(x)).mean() < 0.05


@pytest.mark.parametrize(("fmt", "acc"), PAIRS)
def test_overflow_cases_sit_at_the_top_of_the_range(fmt: str, acc: str) -> None:
    f, af = get_format(fmt), get_format(acc)
    cs = _gen("overflow", fmt, acc)
    assert (np.abs(cs.c) >= 2.0 ** (af.emax - 2)).all()
    big = np.abs(_exact_results(cs)) > af.max
    if 2 * f.emax >= af.emax:  # products can reach the top (not fp16 into FP32)
        assert 0.05 < big.mean() < 0.95
        assert (np.abs(cs.a) >= 2.0 ** ((af.emax - 4) // 2)).all()


def test_values_and_generate_validate_arguments() -> None:
    with pytest.raises(ValueError, match="unknown generator 'nope'; accepted: integers"):
        generate("nope", problems=1, fmt="fp16", acc="float32", k=16, rng=RNG)
    with pytest.raises(ValueError, match="problems must be a positive int, got 0"):
        generate("uniform", problems=0, fmt="fp16", acc="float32", k=16, rng=RNG)
    with pytest.raises(ValueError, match="k must be even"):
        generate("uniform", problems=1, fmt="fp16", acc="float32", k=3, rng=RNG)
    with pytest.raises(ValueError, match="empty exponent window"):
        values(RNG, (2,), get_format("fp16"), 20, 30)


# ----------------------------------------------------------------------------- crosscheck engine
def _device_of(model: str, **options: Any) -> Any:
    def device(instr: Instruction, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return emulate_words(instr, model, a, b, c, **options)

    return device


def test_emulate_words_matches_the_spec_example_e10() -> None:
    """tensorcore.md 2.7 E10: a = b = [1, 2**-12 x 14, 0], C = 0; A100 0x3f800006."""
    i = INSTRUCTIONS["fp16"]
    row = np.array([1.0] + [2.0**-12] * 14 + [0.0])
    a = to_words(np.broadcast_to(row, (1, 16, 16)).copy(), "fp16")
    b = to_words(np.broadcast_to(row[:, None], (1, 16, 8)).copy(), "fp16")
    c = np.zeros((1, 16, 8), np.uint32)
    got = {m: int(emulate_words(i, m, a, b, c)[0, 0, 0]) for m in ("a100", "h100")}
    assert got == {"a100": 0x3F800006, "h100": 0x3F800007}


@pytest.mark.parametrize("name", list(INSTRUCTIONS))
def test_crosscheck_of_a_model_against_itself_finds_nothing(name: str) -> None:
    i = INSTRUCTIONS[name]
    for gen in GENERATORS:
        r = crosscheck(i, "h100", gen, cases=300, device=_device_of("h100"), rng=RNG)
        assert (r.cases, r.mismatches, r.saved) == (384, 0, {})


def test_crosscheck_finds_and_saves_a_different_architecture(tmp_path: Path) -> None:
    i = INSTRUCTIONS["bf16"]
    r = crosscheck(i, "h100", "uniform", cases=4096, device=_device_of("a100"), rng=RNG,
                   max_saved=50)  # fmt: skip
    assert r.cases == 4096 and 0.005 < r.mismatches / r.cases < 0.9
    saved = r.saved_arrays()
    assert len(saved["c"]) == 50 and saved["a"].shape == (50, 16)
    # Each saved row really is a mismatch case: rebuild its 1 x 1 problem and re-run both models.
    n = len(saved["c"])
    a = np.zeros((n, 16, 16), np.uint16)
    b = np.zeros((n, 16, 8), np.uint16)
    c = np.zeros((n, 16, 8), np.uint32)
    a[:, 0, :], b[:, :, 0], c[:, 0, 0] = saved["a"], saved["b"], saved["c"]
    assert np.array_equal(emulate_words(i, "h100", a, b, c)[:, 0, 0], saved["model"])
    assert np.array_equal(emulate_words(i, "a100", a, b, c)[:, 0, 0], saved["device"])
    path = tmp_path / "m.npz"
    assert save_mismatches([r], path) == 50
    with np.load(path) as z:
        assert np.array_equal(z["bf16__uniform__device"], saved["device"])
        assert z["bf16__uniform__meta"].tolist() == ["h100", str(r.mismatches), "4096"]


def test_crosscheck_model_options_reach_the_model() -> None:
    i = INSTRUCTIONS["fp16"]
    narrow = _device_of("h100", frac_bits=24)
    r = crosscheck(i, "h100", "uniform", cases=2048, device=narrow, rng=RNG,
                   options={"frac_bits": 24})  # fmt: skip
    assert r.mismatches == 0
    r = crosscheck(i, "h100", "uniform", cases=2048, device=narrow, rng=RNG)
    assert r.mismatches > 0


@pytest.mark.parametrize("name", ["bf16", "tf32", "fp16_acc16"])
def test_subnormal_cases_probe_the_sign_of_tiny_results(name: str) -> None:
    """Open question 8.2 (+0 or -0 for a negative sum truncated to zero) shows up in the data."""
    i = INSTRUCTIONS[name]
    keep = _device_of("h100", tiny_sign="keep")
    r = crosscheck(i, "h100", "subnormal", cases=8192, device=keep, rng=RNG)
    assert r.mismatches > 0
    neg_zero = 0x80000000 if i.acc_bits == 32 else 0x8000
    assert (r.saved_arrays()["device"] == neg_zero).all()  # -0 against the model's +0
    r = crosscheck(i, "h100", "subnormal", cases=8192, device=keep, rng=RNG,
                   options={"tiny_sign": "keep"})  # fmt: skip
    assert r.mismatches == 0


def test_crosscheck_validates_arguments() -> None:
    with pytest.raises(ValueError, match="cases must be a positive int"):
        crosscheck(INSTRUCTIONS["fp16"], "h100", "uniform", cases=0, device=_device_of("h100"),
                   rng=RNG)  # fmt: skip
    with pytest.raises(ValueError, match="ksteps must be a positive int"):
        crosscheck(INSTRUCTIONS["fp16"], "h100", "uniform", cases=1, device=_device_of("h100"),
                   rng=RNG, ksteps=0)  # fmt: skip


# ----------------------------------------------------------------------------- CLI
def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.configure(p)
    return p.parse_args(list(argv))


def test_cli_without_gpu_says_so_and_exits_nonzero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "cupy_or_none", lambda: None)
    assert cli.run(_args()) == cli.NO_GPU == 3
    err = capsys.readouterr().err
    assert "needs an NVIDIA GPU and CuPy" in err and "nothing was checked" in err


def test_cli_module_without_cupy_exits_3() -> None:
    code = ("import sys; sys.modules['cupy'] = None; from fpemu.cli.crosscheck import main; "
            "raise SystemExit(main(['--cases', '10']))")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "needs an NVIDIA GPU" in r.stderr


def _execute(args: argparse.Namespace, device_model: str, sm: int) -> tuple[int, str]:
    buf = io.StringIO()
    rc = cli.execute(args, device=_device_of(device_model), sm=sm, label="CPU stand-in",
                     console=Console(file=buf, width=120))  # fmt: skip
    return rc, buf.getvalue()


def test_cli_execute_reports_every_row_and_passes_when_all_match(tmp_path: Path) -> None:
    save = tmp_path / "m.npz"
    rc, out = _execute(_args("--cases", "256", "--save", str(save)), "h100", 90)
    assert rc == 0 and not save.exists()
    assert "model: h100" in out and "all" in out and "bit for bit" in out
    for g in GENERATORS:
        assert g in out
    for name in INSTRUCTIONS:
        assert name in out


def test_cli_execute_fails_and_saves_on_mismatch(tmp_path: Path) -> None:
    save = tmp_path / "m.npz"
    args = _args("--cases", "2048", "--instructions", "fp16,bf16", "--generators", "uniform",
                 "--save", str(save))  # fmt: skip
    rc, out = _execute(args, "b200", 80)  # a "device" that is not the A100 the table implies
    assert rc == 1 and save.exists() and "mismatching cases" in out
    with np.load(save) as z:
        assert {"fp16__uniform__a", "bf16__uniform__model"} <= set(z.files)


def test_cli_execute_marks_unsupported_instructions() -> None:
    rc, out = _execute(_args("--cases", "128", "--generators", "integers"), "t4", 75)
    assert rc == 0 and "needs sm_80" in out and "fp16_k8" in out
    args = _args("--cases", "128", "--instructions", "fp16,bf16")
    rc, out = _execute(args, "t4", 75)  # nothing runs on Turing: not a pass
    assert rc == cli.NO_GPU and "nothing was checked" in out


def test_cli_execute_flags_a_layout_failure(tmp_path: Path) -> None:
    def scrambled(instr: Instruction, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return emulate_words(instr, "h100", a[:, ::-1].copy(), b, c)  # rows of A mixed up

    buf = io.StringIO()
    args = _args("--cases", "256", "--instructions", "bf16", "--generators", "integers",
                 "--save", str(tmp_path / "m.npz"))  # fmt: skip
    console = Console(file=buf, width=200)
    rc = cli.execute(args, device=scrambled, sm=90, label="x", console=console)
    assert rc == 1 and "fragment layout or the kernel is wrong" in buf.getvalue()


def test_emulation_chains_instructions_not_model_blocks() -> None:
    """fp16_k8 on an H100 model: two k8 instructions are two blocks, not one 16-block."""
    i = INSTRUCTIONS["fp16_k8"]
    cs = generate("uniform", problems=64, fmt=i.fmt, acc=i.acc, k=16, rng=RNG)
    a, b, c = to_words(cs.a, i.fmt), to_words(cs.b, i.fmt), to_words(cs.c, i.acc)
    two = emulate_words(i, "h100", a, b, c)
    first = emulate_words(i, "h100", a[:, :, :8].copy(), b[:, :8].copy(), c)
    assert np.array_equal(two, emulate_words(i, "h100", a[:, :, 8:].copy(), b[:, 8:].copy(),
                                             first))  # fmt: skip
    one_block = emulate_words(INSTRUCTIONS["fp16"], "h100", a, b, c)
    assert not np.array_equal(two, one_block)


def test_cli_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="--generators='uniform,bogus': unknown"):
        _execute(_args("--generators", "uniform,bogus"), "h100", 90)


def _pretend_gpu(monkeypatch: pytest.MonkeyPatch, cc: tuple[int, int], model: str) -> None:
    """Make cli.run() see a GPU of compute capability ``cc`` whose MMA behaves like ``model``."""
    monkeypatch.setattr(cli, "cupy_or_none", lambda: object())
    monkeypatch.setattr(cli, "device_capability", lambda _: cc)
    monkeypatch.setattr(cli, "device_name", lambda _: "pretend GPU")
    monkeypatch.setattr(cli, "run_mma", _device_of(model))


def test_cli_run_on_a_pretend_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _pretend_gpu(monkeypatch, (8, 9), "ada")
    args = _args("--cases", "256", "--generators", "uniform,specials", "--save",
                 str(tmp_path / "m.npz"))  # fmt: skip
    assert cli.run(args) == 0
    out = capsys.readouterr().out
    assert "pretend GPU (compute capability 8.9)" in out and "model: ada" in out


def test_cli_run_explains_an_unknown_gpu_or_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _pretend_gpu(monkeypatch, (6, 1), "a100")
    assert cli.run(_args("--cases", "128")) == 2
    assert "no tensor-core model for compute capability 6.1" in capsys.readouterr().err
    assert cli.run(_args("--cases", "128", "--model", "a100", "--instructions", "fp32")) == 2
    assert "--instructions='fp32': unknown" in capsys.readouterr().err
