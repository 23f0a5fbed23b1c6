"""clean --scope generated: lists, deletes only without --dry-run, never outside, no escapes;
only ever in this project's own root, found from the package (never the current directory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_kernel import paths
from rmsnorm_kernel.cli import clean
from rmsnorm_kernel.cli.main import main

PYPROJECT = '[project]\nname = "rmsnorm-kernel"\nversion = "0"\n'


def _mark_project(root: Path, name: str = "rmsnorm-kernel") -> None:
    """What makes a folder a checkout of this project: conf/ and its pyproject.toml."""
    (root / "conf").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECT.replace("rmsnorm-kernel", name))


@pytest.fixture
def decoys(tmp_path) -> Path:
    """Another directory with generated-looking files that clean must never touch."""
    other = tmp_path / "elsewhere"
    (other / "outputs").mkdir(parents=True)
    (other / "checkpoints").mkdir()
    (other / "outputs" / "results.csv").write_text("precious results")
    (other / "checkpoints" / "model.pt").write_bytes(b"precious weights")
    return other


def _decoys_intact(other: Path) -> bool:
    return (other / "outputs" / "results.csv").read_text() == "precious results" and (
        other / "checkpoints" / "model.pt"
    ).read_bytes() == b"precious weights"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A stand-in checkout, made the package's own root (so no test touches the real repo)."""
    root = tmp_path / "project"
    _mark_project(root)
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    for folder in ("outputs", "checkpoints"):
        (root / folder).mkdir(parents=True)
        (root / folder / ".gitkeep").write_text("")
    (root / "outputs" / "checks").mkdir()
    (root / "outputs" / "checks" / "check-forward.json").write_text("{}")
    (root / "checkpoints" / "train_triton_seed0.safetensors").write_bytes(b"x")
    (root / "src").mkdir()
    (root / "src" / "keep.py").write_text("# source")
    (tmp_path / "outside.txt").write_text("do not touch")
    return root


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_dry_run_lists_and_deletes_nothing(project, capsys):
    before = _files(project.parent)
    assert main(["clean", "--scope", "generated", "--dry-run", "--root", str(project)]) == 0
    out = capsys.readouterr().out
    assert "would delete" in out
    assert "outputs/checks" in out and "train_triton_seed0.safetensors" in out
    assert ".gitkeep" not in out and "keep.py" not in out
    assert _files(project.parent) == before


def test_clean_deletes_generated_only(project):
    assert main(["clean", "--scope", "generated", "--root", str(project)]) == 0
    assert sorted(p.name for p in (project / "outputs").iterdir()) == [".gitkeep"]
    assert sorted(p.name for p in (project / "checkpoints").iterdir()) == [".gitkeep"]
    assert (project / "src" / "keep.py").exists()
    assert (project.parent / "outside.txt").read_text() == "do not touch"


def test_symlink_escaping_is_refused(project, capsys):
    (project / "outputs" / "checks" / "escape").symlink_to(project.parent / "outside.txt")
    before = _files(project.parent)
    assert main(["clean", "--scope", "generated", "--root", str(project)]) == 1
    assert "refused" in capsys.readouterr().out
    assert _files(project.parent) == before
    assert (project.parent / "outside.txt").read_text() == "do not touch"


def test_symlinked_root_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "p"
    _mark_project(root)
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("x")
    (root / "outputs").symlink_to(elsewhere, target_is_directory=True)
    assert main(["clean", "--scope", "generated", "--root", str(root)]) == 1
    assert (elsewhere / "precious").exists()


def test_scope_is_required():
    with pytest.raises(SystemExit):
        main(["clean"])


def test_from_another_directory_nothing_is_deleted(project, decoys, monkeypatch, capsys):
    monkeypatch.chdir(decoys)
    assert main(["clean", "--scope", "generated"]) == 1
    out = capsys.readouterr().out
    assert "refused" in out and str(decoys) in out and str(project) in out
    assert _decoys_intact(decoys)
    assert (project / "checkpoints" / "train_triton_seed0.safetensors").exists()


def test_a_root_that_is_not_this_project_is_refused_by_name(project, decoys, capsys):
    _mark_project(decoys)  # even another checkout of the same project is not this one
    assert main(["clean", "--scope", "generated", "--root", str(decoys)]) == 1
    out = capsys.readouterr().out
    assert "--root must be this project's root" in out and str(decoys) in out
    assert _decoys_intact(decoys)
    assert (project / "checkpoints" / "train_triton_seed0.safetensors").exists()


def test_inside_the_project_it_finds_its_root_itself(project, monkeypatch):
    monkeypatch.chdir(project / "src")
    assert main(["clean", "--scope", "generated"]) == 0
    assert sorted(p.name for p in (project / "checkpoints").iterdir()) == [".gitkeep"]
    assert (project / "src" / "keep.py").exists()


@pytest.mark.parametrize("name", ["other-project", None])
def test_a_package_outside_a_checkout_of_this_project_refuses(project, name, capsys):
    if name is None:
        (project / "pyproject.toml").unlink()
    else:
        _mark_project(project, name)
    assert main(["clean", "--scope", "generated", "--root", str(project)]) == 1
    assert f"{project} (where the package lives) is not a checkout of rmsnorm-kernel" in (
        capsys.readouterr().out
    )
    assert (project / "checkpoints" / "train_triton_seed0.safetensors").exists()


def test_the_real_command_from_another_directory_refuses(decoys):
    """The installed command, the real project root, a foreign cwd (dry run: harmless anyway)."""
    cmd = [sys.executable, "-m", "rmsnorm_kernel.cli", "clean", "--scope", "generated"]
    proc = subprocess.run(
        [*cmd, "--dry-run"], cwd=decoys, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"the current directory {decoys} is outside this project" in proc.stdout
    assert clean.project_root() == Path(paths.REPO_ROOT).resolve()
    assert (clean.project_root() / "conf" / "cli.yaml").is_file()
    assert _decoys_intact(decoys)
