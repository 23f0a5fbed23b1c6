"""Layers only look down: kernel layer <- experiment layer and integrations <- command set (cli).

- The kernel layer (the package's top modules) imports only torch, triton, the standard library
  and its own siblings (static scan), and using it loads no hydra / omegaconf / lightning
  (runtime, in a fresh interpreter).
- The experiment layer, the integrations and the main job's entry point never import the command
  set: neither in their sources (static scan, function-level imports included) nor at runtime
  after importing every one of their modules.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "rmsnorm_kernel"
PKG_DIR = Path(__file__).resolve().parents[2] / "src" / PACKAGE
PROBE = Path(__file__).with_name("probe_kernel.py")
# The package top holds the kernel layer plus the main job's entry point (a Hydra shell).
ENTRY_POINTS = {"train"}
UPPER_PACKAGES = {"experiment", "integrations", "cli"}
# Subpackages of the kernel layer (scanned as its top modules are).
KERNEL_PACKAGES = {"kernels"}
KERNEL_THIRD_PARTY = {"torch", "triton"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG_DIR.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Absolute names of every module ``path`` imports, anywhere in the file: ``(line, name)``.

    ``from X import y`` yields both ``X`` and ``X.y`` (y may be a submodule); relative imports
    are resolved against the file's package.
    """
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _sources(*subpackages: str) -> list[Path]:
    return sorted(p for sub in subpackages for p in (PKG_DIR / sub).rglob("*.py"))


def _kernel_modules() -> list[Path]:
    top = [p for p in PKG_DIR.glob("*.py") if p.stem not in ENTRY_POINTS]
    return sorted(top + _sources(*KERNEL_PACKAGES))


def _is_upper(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == PACKAGE and len(parts) > 1 and parts[1] in UPPER_PACKAGES | ENTRY_POINTS


def test_layout_is_what_the_scans_assume():
    kernel = {_module_name(p).removeprefix(PACKAGE + ".") for p in _kernel_modules()}
    assert {"backend", "contract", "kernels", "kernels.forward", "ops", "function"} <= kernel
    # Every subpackage is in one layer or the other: none escapes both scans.
    subpackages = {p.parent.name for p in PKG_DIR.glob("*/__init__.py")}
    assert subpackages == UPPER_PACKAGES | KERNEL_PACKAGES, subpackages
    assert (PKG_DIR / "experiment" / "__init__.py").is_file()
    assert (PKG_DIR / "cli" / "__init__.py").is_file()
    # The scan of the upper layers sees real imports (guards against a scan that finds nothing).
    assert any(
        name.startswith("lightning") for p in _sources("experiment") for _, name in _imports(p)
    )


@pytest.mark.parametrize("path", _kernel_modules(), ids=lambda p: str(p.relative_to(PKG_DIR)))
def test_kernel_layer_imports_only_torch_triton_stdlib_and_siblings(path):
    bad = []
    for line, name in _imports(path):
        top = name.split(".")[0]
        if top == PACKAGE:
            if _is_upper(name):
                bad.append((line, name))
        elif top not in KERNEL_THIRD_PARTY | set(sys.stdlib_module_names) | {"__future__"}:
            bad.append((line, name))
    assert not bad, f"{path.name} imports outside the kernel layer: {bad}"


@pytest.mark.parametrize(
    "path",
    _sources("experiment", "integrations") + [PKG_DIR / f"{e}.py" for e in ENTRY_POINTS],
    ids=lambda p: str(p.relative_to(PKG_DIR)),
)
def test_lower_layers_never_import_the_command_set(path):
    cli = f"{PACKAGE}.cli"
    bad = [(line, n) for line, n in _imports(path) if n == cli or n.startswith(cli + ".")]
    assert not bad, f"{path.relative_to(PKG_DIR)} imports the command set: {bad}"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=300
    )


def test_importing_every_lower_layer_module_loads_no_command_set():
    code = f"""
import importlib, json, pkgutil, sys
import {PACKAGE}
names = []
for sub in ("experiment", "integrations", *{sorted(ENTRY_POINTS)!r}):
    mod = importlib.import_module("{PACKAGE}." + sub)
    names.append(mod.__name__)
    if hasattr(mod, "__path__"):
        for info in pkgutil.walk_packages(mod.__path__, mod.__name__ + "."):
            importlib.import_module(info.name)
            names.append(info.name)
print(json.dumps({{"imported": names,
                  "cli": sorted(m for m in sys.modules if m.startswith("{PACKAGE}.cli"))}}))
"""
    res = _run(code)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert f"{PACKAGE}.experiment.core.run" in report["imported"]
    assert report["cli"] == []


def test_using_the_kernel_layer_loads_no_experiment_stack():
    res = subprocess.run(
        [sys.executable, "-I", str(PROBE)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["calls"] == {"forward": 2, "backward": 2}
    assert report["upper_modules"] == []
