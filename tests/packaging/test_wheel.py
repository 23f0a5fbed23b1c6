"""The kernel library installs alone: its wheel, with no extras, runs in a venv of torch + triton.

A user who wants only the kernel runs ``pip install rmsnorm-kernel`` beside the torch they have.
This test builds the wheel from a copy of the sources, makes a fresh venv that sees only torch,
triton and what the wheel's metadata declares (each with its own dependencies; nothing else of
this venv, so no hydra, lightning or numpy unless declared), installs the wheel there with pip
(offline: an undeclared dependency fails the install or the import), and runs forward + backward
in that venv. The dependencies are linked from this venv rather than downloaded, so the test
takes seconds and needs no network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("probe_kernel.py")
# What a kernel-only user already has (the wheel must not need to bring them).
BASE = ("torch", "triton")


def _requirements(dist_requires: list[str] | None) -> list[Requirement]:
    """Requirements that apply here with no extras selected."""
    env = {**default_environment(), "extra": ""}
    return [
        req
        for req in map(Requirement, dist_requires or [])
        if req.marker is None or req.marker.evaluate(env)
    ]


def _closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """Installed distributions of ``names`` and everything they require (no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise AssertionError(
                f"{name} is required but not installed in this venv: run `make setup`"
            ) from None
        found[name] = dist
        todo.extend(req.name for req in _requirements(dist.requires))
    return found


def _link_distributions(dists: dict[str, metadata.Distribution], into: Path) -> None:
    """Symlink each distribution's top-level files/dirs (and its .dist-info) into ``into``."""
    into.mkdir()
    for dist in dists.values():
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        assert tops, f"{dist.metadata['Name']} lists no files (RECORD missing?)"
        for top in tops:
            if top == "__pycache__" or not (base / top).exists() or (into / top).exists():
                continue
            (into / top).symlink_to(base / top)


def _build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the sources (nothing is written into the repo)."""
    src = out / "src_copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "src",
        src / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    # No build isolation: setuptools comes from this venv (pinned by the lock), so no download.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out / "dist"),
            str(src),
        ],
        check=True,
    )
    (wheel,) = (out / "dist").glob("rmsnorm_kernel-*.whl")
    return wheel


def _declared(wheel: Path) -> list[str]:
    """Requires-Dist of the wheel that apply with no extras."""
    with zipfile.ZipFile(wheel) as zf:
        (meta_name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        meta = zf.read(meta_name).decode()
    requires = [
        line.split(":", 1)[1].strip()
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    return [req.name for req in _requirements(requires)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_declares_only_kernel_dependencies(wheel):
    declared = {canonicalize_name(n) for n in _declared(wheel)}
    # numpy: Triton's interpreter (the CPU path) imports it, and neither torch nor triton says so.
    assert declared == {"torch", "triton", "numpy"}


def test_wheel_alone_runs_forward_and_backward(wheel, tmp_path):
    declared = _declared(wheel)
    allowed = _closure([*BASE, *declared])
    assert not {"hydra-core", "omegaconf", "lightning"} & set(allowed)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    env_python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(env_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    links = tmp_path / "linked-site-packages"
    _link_distributions(allowed, links)
    (site / "linked_dependencies.pth").write_text(f"{links}\n")

    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    # This venv's pip, acting on the fresh venv; --no-index: dependencies must already be there.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env_python),
            "install",
            "-q",
            "--no-index",
            str(wheel),
        ],
        check=True,
        env=clean_env,
    )
    # -I: no PYTHONPATH, no user site, no cwd on sys.path: only the fresh venv.
    res = subprocess.run(
        [str(env_python), "-I", str(PROBE)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert Path(report["file"]).is_relative_to(site), report["file"]  # the wheel, not src/
    assert report["upper_modules"] == []
    assert report["calls"] == {"forward": 2, "backward": 2}
