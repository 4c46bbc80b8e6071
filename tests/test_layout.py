"""The package layout is the architecture: layers import downward only, and no import cycles.

The test reads every module's imports with :mod:`ast` (module level and inside functions: a lazy
import is a dependency too) and checks them against the layer table below, the same table that
``docs/architecture.md`` draws.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fpemu"

#: Layer of each top-level part of fpemu; a module may import only from its own layer or lower.
CORE = (
    "backend", "formats", "inputs", "rounding", "bits", "limits", "storage", "arith", "describe",
    "parallel", "procpool", "ring", "offload", "daskarray",
)  # fmt: skip
LAYERS: dict[str, int] = {
    **{f"fpemu.{name}": 0 for name in CORE},  # the numeric core
    "fpemu.linalg": 1,  # dot/matmul/sum with accumulation models, error analysis
    "fpemu.testing": 1,  # bit-level assertions and Hypothesis strategies
    "fpemu.plots": 1,  # pictures of formats and errors
    "fpemu.pages": 1,  # self-contained HTML report pages (tables, inline SVG figures)
    "fpemu.tensorcore": 2,  # matrix-instruction models and the GPU cross-check harness
    "fpemu.quant": 3,  # block formats, scale rules, scaled matmul
    "fpemu.amp": 4,  # AMP policies, autocast, loss scalers
    "fpemu.nn": 5,  # autograd Tensor, functional ops, modules, optimizers
    "fpemu.training": 6,  # training loop, datasets, the experiment
    "fpemu.validate.ops": 6,  # emulations of torch's ATen ops (NumPy; no torch import)
    "fpemu.validate.watch": 6,  # fpemu.watch: every ATen op judged against validate.ops
    "fpemu.emulate": 6,  # fpemu.emulate: torch programs run on validate.ops' emulations
    "fpemu": 7,  # the public API (fpemu/__init__.py): re-exports layers 0 to 6
    "fpemu.validate": 8,  # framework bridges (PyTorch, Keras)
    "fpemu.verify": 8,  # verification campaigns
    "fpemu.cli": 9,  # the command line
    "fpemu.__main__": 9,  # python -m fpemu: the command line
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> tuple[str, int]:
    """The layer entry that owns ``module`` (longest matching prefix)."""
    best = max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)
    return best, LAYERS[best]


def _resolve(name: str) -> str | None:
    """The fpemu module that ``name`` (a module or an attribute of one) refers to."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(module: str) -> set[str]:
    """The fpemu modules that ``module`` imports, anywhere in its source."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            subs = [f"{base}.{a.name}" for a in node.names]
            # "from pkg import submodule" depends on the submodule; "from pkg import name" on pkg
            names = subs + ([base] if any(n not in MODULES for n in subs) else [])
        else:
            continue
        for n in names:
            if n == "fpemu" or n.startswith("fpemu."):
                target = _resolve(n)
                if target is not None and target != module:
                    found.add(target)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def test_layers_import_downward_only() -> None:
    wrong = []
    for m, targets in GRAPH.items():
        owner, rank = layer(m)
        for t in sorted(targets):
            towner, trank = layer(t)
            if trank > rank:
                wrong.append(f"{m} ({owner}, layer {rank}) imports {t} ({towner}, layer {trank})")
    assert not wrong, "imports that point upward:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    # A submodule importing a sibling goes through the package __init__ at run time, but that is
    # Python's loading order, not a dependency of the submodule on the package's exports: keep
    # only edges to a package __init__ from outside that package.
    def is_init_of(t: str, m: str) -> bool:
        return MODULES[t].name == "__init__.py" and m.startswith(t + ".")

    return {m: {t for t in ts if not is_init_of(t, m)} for m, ts in graph.items()}


def test_no_import_cycles() -> None:
    cycles = _cycles(_without_package_inits(GRAPH))
    assert not cycles, f"import cycles: {cycles}"


def test_cycle_detector_finds_a_planted_cycle() -> None:
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(planted) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_layer_check_sees_a_planted_upward_import() -> None:
    assert layer("fpemu.rounding")[1] < layer("fpemu.cli.tour")[1]
    assert layer("fpemu.linalg.chains") == ("fpemu.linalg", 1)
    assert "fpemu.linalg.registry" in GRAPH["fpemu.linalg.chains"]


def test_every_module_belongs_to_a_layer() -> None:
    for m in MODULES:
        assert layer(m)[0] in LAYERS


def test_command_line_code_lives_in_cli_only() -> None:
    offenders = []
    for m, path in MODULES.items():
        if m.startswith("fpemu.cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
                offenders.append(m)
            if isinstance(node, ast.ImportFrom) and node.module == "argparse":
                offenders.append(m)
            if isinstance(node, ast.FunctionDef) and node.name in ("configure", "run") and (
                node.col_offset == 0
            ):
                offenders.append(f"{m}.{node.name}")
    assert not offenders, f"command-line code outside fpemu/cli: {sorted(set(offenders))}"


@pytest.mark.parametrize(
    "package", sorted(m for m, p in MODULES.items() if p.name == "__init__.py" and m != "fpemu")
)
def test_every_subpackage_says_what_it_is_for_and_exports_its_api(package: str) -> None:
    tree = ast.parse(MODULES[package].read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc, f"{package}/__init__.py has no docstring"
    first = doc.splitlines()[0]
    assert first.endswith(".") and len(first) <= 100, f"{package}: {first!r}"
    names = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
    ]
    assert names, f"{package}/__init__.py has no __all__"


def test_reference_is_independent_of_fpemu() -> None:
    for path in sorted((ROOT / "reference").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "fpemu" for a in node.names), path
            if isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "fpemu", path
