"""The package's layers, in pipeline order: a module imports only modules of its own layer or of lower ones, and no
modules import each other in a cycle (imports inside functions included; those under ``if TYPE_CHECKING:`` are
annotations only and left out).

A new module belongs to the layer of its package (or is added to ``LAYERS`` where it starts a new one).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tensortune"

#: lowest first; a module belongs to the layer of the longest prefix that names it
LAYERS: list[tuple[str, ...]] = [
    ("tensortune.version", "tensortune.errors", "tensortune.dtype", "tensortune.env"),
    ("tensortune.target",),
    ("tensortune.te",),  # tensor expressions (and the expressions of the loop IR)
    ("tensortune.ir", "tensortune.arith"),  # loop IR, integer analysis
    ("tensortune.schedule",),
    ("tensortune.lower",),
    ("tensortune.codegen",),
    ("tensortune.runtime",),
    ("tensortune.build",),  # one build path, a backend per target kind
    ("tensortune.ops", "tensortune.workloads"),  # operators as tensor expressions, reference shapes
    ("tensortune.autotvm",),  # spaces, templates, measurement, tuners, logs
    ("tensortune.graph",),  # the graph IR (no operator of its own)
    ("tensortune.operators",),  # one module per operator family
    ("tensortune.frontend", "tensortune.passes"),  # ONNX import, graph passes
    ("tensortune.network",),  # whole networks: tasks, programs, modules, tuning, refining
    ("tensortune.benchmarking",),  # comparisons with peer libraries
    ("tensortune.cli", "tensortune.__main__", "tensortune"),  # the command line and the package's facade
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("tensortune",) + path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> int:
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len,
               default=None)
    assert best is not None, f"{module} is in no layer of LAYERS"
    return next(k for k, layer in enumerate(LAYERS) if best in layer)


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(module: str) -> set[str]:
    """The tensortune modules ``module`` imports, anywhere in it but under ``if TYPE_CHECKING:``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            names = []
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


GRAPH = {m: imports(m) for m in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_nothing_of_a_higher_layer(module):
    mine = layer_of(module)
    higher = sorted(m for m in GRAPH[module] if layer_of(m) > mine)
    assert not higher, f"{module} (layer {mine}: {LAYERS[mine]}) imports {higher} of higher layers"


def test_no_modules_import_each_other_in_a_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            connect(v)
    assert not cycles, f"modules importing each other: {cycles}"


def test_every_module_is_in_a_layer_and_the_checker_sees_imports():
    for m in MODULES:
        layer_of(m)
    assert "tensortune.te.expr" in GRAPH["tensortune.ir.nodes"]
    assert "tensortune.graph.ir" in GRAPH["tensortune.operators.conv"]
    assert layer_of("tensortune.network.program") > layer_of("tensortune.operators.kernel") > layer_of("tensortune.te")
