"""The image's install step has every file it reads (no Docker engine needed).

The Dockerfile copies a few files, then runs ``make setup TORCH_SPEC=`` before the rest of the
tree arrives (so the install layer is cached across source edits). This test replays those COPY
instructions into an empty folder, filtered by .dockerignore, and there runs ``make -n setup
TORCH_SPEC=`` (Make refuses when a prerequisite such as the lock is missing) and builds the
package (pyproject's readme and the sources must be there). ``make lint`` runs hadolint on it.
"""

from __future__ import annotations

import fnmatch
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ignored(rel: Path, patterns: list[str]) -> bool:
    """Docker's rule, simply: the last matching pattern wins; ``!`` re-includes; a matching
    folder excludes what is inside it; ``**/`` matches at any depth."""
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").strip("/")
        candidates = [Path(*rel.parts[:i]).as_posix() for i in range(1, len(rel.parts) + 1)]
        bare = pattern.removeprefix("**/")
        if any(
            fnmatch.fnmatchcase(c, pattern) or fnmatch.fnmatchcase(Path(c).name, bare)
            for c in candidates
        ):
            verdict = not negate
    return verdict


def _install_step() -> tuple[list[tuple[list[str], str]], str]:
    """The COPY instructions before the RUN that calls ``make setup``, and that RUN's command."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    copies = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["COPY"]:
            assert not any(w.startswith("--") for w in words), f"unhandled COPY flags: {line}"
            copies.append((words[1:-1], words[-1]))
        elif words[:1] == ["RUN"] and "make setup" in line:
            return copies, line.split("RUN", 1)[1]
    raise AssertionError("the Dockerfile has no RUN ... make setup")


def _stage(into: Path, copies: list[tuple[list[str], str]]) -> None:
    patterns = [
        p.strip()
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    for sources, dest in copies:
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
            files = [ROOT / src] if (ROOT / src).is_file() else sorted((ROOT / src).rglob("*"))
            for f in files:
                rel = f.relative_to(ROOT)
                if f.is_dir() or _ignored(rel, patterns):
                    continue
                if f == ROOT / src:  # a file: into the folder `dest` (ends with /) or as `dest`
                    target = into / dest / f.name if dest.endswith("/") else into / dest
                else:
                    target = into / dest / f.relative_to(ROOT / src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)


def test_install_step_has_everything_it_reads(tmp_path):
    copies, run = _install_step()
    assert "make setup TORCH_SPEC=" in run  # keeps the image's CUDA torch
    stage = tmp_path / "image"
    stage.mkdir()
    _stage(stage, copies)

    dry = subprocess.run(
        ["make", "-n", "setup", "TORCH_SPEC=", "PYTHON=python3"],
        cwd=stage,
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    # The lock is installed without torch, triton and the CUDA libraries, and no torch is asked for.
    assert "lock-without-torch.txt" in dry.stdout
    assert 'pip install -q "torch' not in dry.stdout

    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(stage),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    assert list((tmp_path / "dist").glob("rmsnorm_kernel-*.whl"))
