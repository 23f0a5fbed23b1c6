"""The locked environment: requirements/lock.txt is what `make setup` installed, and it is current.

``make setup`` installs the lock (``make lock`` compiles it from pyproject.toml), then writes
``.venv/.installed`` with the torch choice: ``TORCH_SPEC=<the lock's torch>`` for the CPU path,
anything else (``TORCH_SPEC=`` keeps a CUDA torch) for the path that installs the lock without
torch, triton and the CUDA libraries. These tests read the running venv, so they cost no install.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "lock.txt"
TORCH_CPU = ROOT / "requirements" / "torch-cpu.txt"
PROJECT = "rmsnorm-kernel"
# What `make setup TORCH_SPEC=...` leaves to the environment (a CUDA torch pins its own triton).
TORCH_FAMILY = ("torch", "triton", "nvidia-")


def _pins(path: Path) -> dict[str, Version]:
    """``name==version`` lines of a requirements file (comments and options skipped)."""
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{path.name}: not an exact pin: {raw!r}"
        pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def _stamp() -> str:
    stamp = Path(sys.prefix) / ".installed"
    if not stamp.is_file():
        pytest.skip(f"{sys.prefix} was not built by `make setup` (no .installed stamp)")
    return stamp.read_text().strip()


def test_lock_pins_exact_versions_and_no_local_paths():
    text = LOCK.read_text()
    assert "file://" not in text and " @ " not in text  # nothing tied to one machine's disk
    pins = _pins(LOCK)
    assert canonicalize_name(PROJECT) not in pins
    # The CPU path's torch is the one `make lock` resolved around.
    assert pins["torch"] == _pins(TORCH_CPU)["torch"]
    assert not any(name.startswith("nvidia-") for name in pins)  # no CUDA build was resolved


def test_lock_satisfies_every_requirement_of_pyproject():
    """A dependency added to pyproject.toml without `make lock` fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    pins = _pins(LOCK)
    for req in reqs:
        name = canonicalize_name(req.name)
        if name == canonicalize_name(PROJECT):  # the dev extra names the other extras
            continue
        assert name in pins, f"{req} is not in {LOCK.name}: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{LOCK.name} pins {name}=={pins[name]}, outside {req}: run `make lock`"
        )


def test_setup_installed_the_locked_versions():
    stamp = _stamp()
    pins = _pins(LOCK)
    cpu_path = stamp == f"TORCH_SPEC=torch=={pins['torch']}"
    wrong = {}
    for name, version in pins.items():
        if not cpu_path and name.startswith(TORCH_FAMILY):
            continue  # left to the environment by TORCH_SPEC (recorded in the stamp)
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            wrong[name] = (str(version), str(installed))
    assert not wrong, f"venv differs from {LOCK.name} (locked, installed): {wrong}; {stamp}"
