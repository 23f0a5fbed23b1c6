"""Reload exported checkpoints into fresh models and require zero difference.

``python -m rmsnorm_kernel.experiment.exports.reload [--ckpt PATH ...] [--root DIR] [--device D]``
(``make reload-check [CKPT=path]``; ``python -m rmsnorm_kernel.cli check-checkpoints`` runs this
same function): every file listed in ``<root>/index.json`` is verified, its sha256 included, and
so is any ``*.safetensors`` under the root that the index does not list (reported as such). With
``--ckpt`` only the given files are checked (against their index entry when they have one). Each
net is rebuilt from the plain arguments in the file's metadata through the allow-list of builders,
loaded, and its test predictions must be bitwise identical to those stored at training time. A
missing, truncated, altered or unknown-builder file is reported by name and the command exits 1.

The index is trusted only entry by entry (``index.checked_entries``): an entry that names a file
outside ``--root`` (an absolute path, ``..``, a subfolder, a link out), that is not an object, or
that lacks ``sha256`` or ``run_dir`` stops the check (exit 1) before any file is opened.
``--device`` verifies on another device type than the one that made the predictions (e.g. a
cuda-made file on a machine without CUDA: ``--device cpu``); the predictions must still match bit
for bit, and the failure says by how much they differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .checkpoint import CheckpointError, verify_checkpoint
from .index import IndexFileError, checked_entries

__all__ = ["CheckpointError", "check_checkpoints", "main"]


def check_checkpoints(
    paths: list[Path] | None = None, root: Path = Path("checkpoints"), device: str | None = None
) -> list[dict[str, Any]]:
    """Verify ``paths`` (default: every file the index of ``root`` lists, then unlisted ones).

    Returns one :func:`~.checkpoint.verify_checkpoint` result per file, plus ``"indexed"``
    (whether its sha256 came from the index) and ``"run_dir"``. Raises :class:`CheckpointError`
    naming the first file that is missing, truncated, altered or whose reload differs, when an
    index entry is malformed or names a file outside ``root``, or when there is no checkpoint at
    all. ``device``: verify there instead of on the device type that made the predictions.
    """
    root = Path(root)
    try:
        entries = checked_entries(root)
    except IndexFileError as e:
        raise CheckpointError(str(e)) from e
    if paths is None:
        listed = [root / name for name in entries]
        unlisted = [p for p in sorted(root.glob("*.safetensors")) if p.name not in entries]
        paths = listed + unlisted
        if not paths:
            raise CheckpointError(
                f"no checkpoints (index.json or *.safetensors) under {root}/: "
                "run `make train` first"
            )
    results = []
    for path in map(Path, paths):
        entry = entries.get(path.name) if path.parent.resolve() == root.resolve() else None
        if entry is not None and not path.exists():
            raise CheckpointError(
                f"checkpoint not found: {path}, which {root}/index.json lists (written by the "
                f"run in {entry['run_dir']}): deleted by hand? To start over, empty {root}/, "
                "index.json included"
            )
        result = verify_checkpoint(path, device=device, sha256=entry["sha256"] if entry else None)
        result.update(indexed=entry is not None, run_dir=entry["run_dir"] if entry else None)
        results.append(result)
    return results


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The check's arguments (``--ckpt``, ``--root``, ``--device``), for this module's command
    line and for ``rmsnorm-cli check-checkpoints``, which dispatches here."""
    parser.add_argument(
        "--ckpt", type=Path, action="append", help="a checkpoint to verify (repeatable)"
    )
    parser.add_argument(
        "--root", type=Path, default=Path("checkpoints"), help="folder with index.json"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="verify on this device (default: the device type that made the predictions)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Verify what ``args`` names; print one line per file; the exit status (0: all bit for bit)."""
    try:
        results = check_checkpoints(args.ckpt, root=args.root, device=args.device)
    except CheckpointError as e:
        print(f"reload check FAILED: {e}", file=sys.stderr)
        return 1
    for r in results:
        source = "sha256 ok" if r["indexed"] else "not in index.json"
        print(
            f"ok  {r['path']}  norm={r['norm']} seed={r['seed']} device={r['device']} "
            f"tensors={r['tensors']} reload_max_diff={r['reload_max_diff']:g} {source}"
        )
    print(f"{len(results)} checkpoint(s) reload bit for bit")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0: every file reloads bit for bit)."""
    parser = argparse.ArgumentParser(
        prog="python -m rmsnorm_kernel.experiment.exports.reload",
        description=__doc__.split("\n\n")[0],
    )
    return run(add_arguments(parser).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
