"""`clean --scope generated [--dry-run]`: delete what the project generated, and nothing else.

Scope ``generated`` = the contents of ``outputs/`` and ``checkpoints/`` under the project root,
except their ``.gitkeep``. Refuses (deleting nothing) when a root is itself a symlink or not a
directory inside the project, or when any link below a root points outside that root. Links are
removed as links, never followed. ``--dry-run`` lists and deletes nothing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

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


def run_clean(project: Path, scope: str, dry_run: bool, console=None) -> int:
    from rich.console import Console

    console = console or Console()
    try:
        the_plan = plan(project, scope)
    except CleanRefused as exc:
        console.print(f"[red]refused:[/red] {exc}")
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
