"""Reload exported checkpoints into fresh models and require zero difference.

``python -m rmsnorm_kernel.experiment.reload [--ckpt PATH ...] [--root checkpoints]``
(``make reload-check [CKPT=path]``): every ``*.safetensors`` under the root, or the given files,
is rebuilt from the net config stored in its metadata, loaded, and its test predictions must be
bitwise identical to those stored at training time. A missing, truncated or mismatched file is
reported by name and the command exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .checkpoint import CheckpointError, verify_checkpoint

__all__ = ["CheckpointError", "check_checkpoints", "main"]


def check_checkpoints(
    paths: list[Path] | None = None, root: Path = Path("checkpoints")
) -> list[dict[str, Any]]:
    """Verify ``paths`` (default: every ``*.safetensors`` under ``root``), in order.

    Returns one ``{"path", "run_name", "norm", "seed", "device", "tensors", "reload_max_diff"}``
    per file. Raises :class:`CheckpointError` naming the first file that is missing, truncated,
    or whose reload differs, or when ``root`` holds no checkpoint at all.
    """
    if paths is None:
        root = Path(root)
        paths = sorted(root.glob("*.safetensors"))
        if not paths:
            raise CheckpointError(
                f"no checkpoints (*.safetensors) under {root}/: run `make train` first"
            )
    return [verify_checkpoint(Path(p)) for p in paths]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmsnorm_kernel.experiment.reload", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--ckpt", type=Path, action="append", help="a checkpoint to verify (repeatable)"
    )
    parser.add_argument(
        "--root", type=Path, default=Path("checkpoints"), help="folder searched without --ckpt"
    )
    args = parser.parse_args(argv)
    try:
        results = check_checkpoints(args.ckpt, root=args.root)
    except CheckpointError as e:
        print(f"reload check FAILED: {e}", file=sys.stderr)
        return 1
    for r in results:
        print(
            f"ok  {r['path']}  norm={r['norm']} seed={r['seed']} device={r['device']} "
            f"tensors={r['tensors']} reload_max_diff={r['reload_max_diff']:g}"
        )
    print(f"{len(results)} checkpoint(s) reload bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
