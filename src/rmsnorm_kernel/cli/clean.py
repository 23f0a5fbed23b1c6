"""`clean --scope generated [--dry-run] [--root DIR]`: delete what the project generated, only.

Scope ``generated`` = the contents of ``outputs/`` and ``checkpoints/`` under the project root,
except their ``.gitkeep``. The project root is found from the package's own location
(``rmsnorm_kernel.paths.REPO_ROOT``), never taken from the current directory, and must be this
project's checkout: a ``conf/`` folder and a ``pyproject.toml`` whose project name is
``rmsnorm-kernel``. Clean refuses (deleting nothing, exit 1, naming the directory) when the
package is not in such a checkout, when run from a directory outside the project without
``--root``, when ``--root`` is not the project root, when ``outputs``/``checkpoints`` is itself a
symlink or not a directory inside the project, or when any link below them points outside.
Links are removed as links, never followed. ``--dry-run`` lists and deletes nothing.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from rmsnorm_kernel import paths

PROJECT_NAME = "rmsnorm-kernel"
SCOPES = {"generated": ("outputs", "checkpoints")}
KEEP = {".gitkeep"}


class CleanRefused(RuntimeError):
    """The plan would touch something outside the generated folders."""


@dataclass
class Plan:
    root: Path
    targets: list[Path]


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def _project_name(pyproject: Path) -> str | None:
    """``[project] name`` of a ``pyproject.toml`` (None when absent or unreadable)."""
    try:
        text = pyproject.read_text()
    except OSError:
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10: the one line that matters, by pattern
        match = re.search(r'(?ms)^\[project\].*?^name\s*=\s*"([^"]+)"', text)
        return match.group(1) if match else None
    try:
        return tomllib.loads(text).get("project", {}).get("name")
    except tomllib.TOMLDecodeError:
        return None


def project_root() -> Path:
    """This project's checkout, found from the package's location; refused if it is not one."""
    root = Path(paths.REPO_ROOT).resolve()
    if not (root / "conf").is_dir() or _project_name(root / "pyproject.toml") != PROJECT_NAME:
        raise CleanRefused(
            f"{root} (where the package lives) is not a checkout of {PROJECT_NAME} (needs conf/ "
            f"and a pyproject.toml named {PROJECT_NAME}): install it editable from a checkout"
        )
    return root


def choose_root(root: Path | None, cwd: Path | None = None) -> Path:
    """The root to clean: the project's own. ``root`` (``--root``), when given, must be it;
    without it the current directory must be inside the project."""
    project = project_root()
    if root is not None:
        if Path(root).resolve() != project:
            raise CleanRefused(
                f"--root must be this project's root {project} (got {root}): refusing to clean "
                "anywhere else"
            )
        return project
    here = Path.cwd() if cwd is None else Path(cwd)
    if not _inside(here.resolve(), project):
        raise CleanRefused(
            f"the current directory {here} is outside this project ({project}): refusing; run it "
            f"from the project or pass --root {project}"
        )
    return project


def plan(project: Path, scope: str = "generated") -> Plan:
    project = project.resolve()
    targets: list[Path] = []
    for name in SCOPES[scope]:
        folder = project / name
        if not folder.exists() and not folder.is_symlink():
            continue
        if folder.is_symlink() or not folder.is_dir():
            raise CleanRefused(f"{folder} is a symlink or not a directory: refusing to clean it")
        real = folder.resolve()
        if not _inside(real, project):
            raise CleanRefused(f"{folder} resolves outside the project ({real})")
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
            for entry in dirnames + filenames:
                p = Path(dirpath) / entry
                if p.is_symlink():
                    target = Path(os.path.realpath(p))
                    if not _inside(target, real):
                        raise CleanRefused(f"{p} links outside {folder} (to {target}): refusing")
        for child in sorted(folder.iterdir()):
            if child.name in KEEP:
                continue
            targets.append(child)
    return Plan(project, targets)


def delete(targets: list[Path]) -> None:
    for p in targets:
        if p.is_symlink() or p.is_file():
            p.unlink()
        else:
            shutil.rmtree(p)  # does not follow symlinks inside


def run_clean(root: Path | None, scope: str, dry_run: bool, console=None) -> int:
    """Clean ``scope`` of this project (``root``: ``--root``, which must be the project's root)."""
    from rich.console import Console
    from rich.markup import escape

    console = console or Console()
    try:
        the_plan = plan(choose_root(root), scope)
    except CleanRefused as exc:
        # One line, never wrapped: the directories it names stay whole (and copyable).
        console.print(f"[red]refused:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)
        return 1
    if not the_plan.targets:
        console.print(f"nothing to clean under {', '.join(SCOPES[scope])}/ of {the_plan.root}")
        return 0
    verb = "would delete" if dry_run else "deleting"
    for p in the_plan.targets:
        kind = "link" if p.is_symlink() else ("dir " if p.is_dir() else "file")
        console.print(f"{verb} {kind} {p.relative_to(the_plan.root)}", highlight=False)
    if dry_run:
        console.print(f"dry run: {len(the_plan.targets)} entries listed, nothing deleted")
        return 0
    delete(the_plan.targets)
    console.print(f"deleted {len(the_plan.targets)} entries (kept .gitkeep)")
    return 0
