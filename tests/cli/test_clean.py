"""clean --scope generated: lists, deletes only without --dry-run, never outside, no escapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmsnorm_kernel.cli.main import main


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
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


def test_symlinked_root_is_refused(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("x")
    (root / "outputs").symlink_to(elsewhere, target_is_directory=True)
    assert main(["clean", "--scope", "generated", "--root", str(root)]) == 1
    assert (elsewhere / "precious").exists()


def test_scope_is_required():
    with pytest.raises(SystemExit):
        main(["clean"])
