"""``rmsnorm_kernel/kernels/`` holds the Triton code and nothing else (static scan): each module is
a docstring, imports, ``@triton.jit`` functions and ``tl.constexpr`` constants; the launchers,
heuristics and Python helpers live in the modules above it. Its ``__init__`` re-exports every
public kernel and constant of its modules, so ``rmsnorm_kernel.kernels.<name>`` names them all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rmsnorm_kernel.kernels as kernels_package

KERNELS_DIR = Path(__file__).resolve().parents[2] / "src" / "rmsnorm_kernel" / "kernels"
MODULES = sorted(p for p in KERNELS_DIR.glob("*.py") if p.name != "__init__.py")


def _is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) == "triton.jit"


def _is_constexpr(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and ast.unparse(value.func) == "tl.constexpr"


def _stray(tree: ast.Module) -> list[str]:
    """Top-level statements that are not a docstring, an import, a jit function or a constant."""
    bad = []
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.FunctionDef) and any(map(_is_triton_jit, node.decorator_list)):
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign) and _is_constexpr(node.value):
            continue
        bad.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return bad


def _public(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {n for n in names if not n.startswith("_")}


def test_the_scan_sees_the_modules():
    assert {"common", "forward", "backward", "dweight_sum"} <= {p.stem for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_kernel_module_holds_only_jit_functions_and_constants(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    assert not _stray(tree), f"{path.name}: {_stray(tree)}"


def test_stray_code_is_seen_by_the_scan():
    """The scan itself can fail: a plain function, a plain constant and a class are reported."""
    tree = ast.parse('"""doc"""\nimport triton\nX = 3\ndef f():\n    pass\nclass C:\n    pass\n')
    assert [s.split(":")[0] for s in _stray(tree)] == ["line 3", "line 4", "line 6"]


def test_the_package_exports_every_public_kernel_and_constant():
    public = set()
    for path in MODULES:
        public |= _public(ast.parse(path.read_text(), filename=str(path)))
    assert public == set(kernels_package.__all__)
    for name in public:
        assert getattr(kernels_package, name) is not None, name
