"""Load a copy of a Python file with text replaced, as a module of its own: how the experiments
build variants of a Triton kernel for A/B in one process (Triton reads a kernel's source from
its file, so the patched text must be a file too)."""

from __future__ import annotations

import importlib.util
import tempfile
from types import ModuleType


def load_patched(path: str, replacements: list[tuple[str, str]], module_name: str) -> ModuleType:
    """``path``'s text with each ``(old, new)`` replaced (each ``old`` must occur exactly once: a
    source that changed fails loudly here, not as a silently unpatched variant), written to a
    temporary file and imported as ``module_name`` (a dotted name inside a package resolves that
    package's relative imports)."""
    with open(path) as f:
        src = f.read()
    for old, new in replacements:
        if src.count(old) != 1:
            raise RuntimeError(f"load_patched: {old!r} occurs {src.count(old)} times in {path}")
        src = src.replace(old, new)
    out = f"{tempfile.mkdtemp()}/{module_name.rsplit('.', 1)[-1]}.py"
    with open(out, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(module_name, out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
