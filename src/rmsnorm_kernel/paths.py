"""Where the repository's ``conf/`` lives: the one place every layer (and the tests) finds it.

Standard library only, so the kernel tests, the command set and the experiment layer can all
import it without loading each other's dependencies.
"""

from __future__ import annotations

from pathlib import Path

#: The repo root: src/rmsnorm_kernel/paths.py -> two levels up from this package.
REPO_ROOT = Path(__file__).resolve().parents[2]
#: conf/ with train.yaml and cli.yaml (the package is installed editable, so the source tree is at
#: hand).
CONFIG_DIR = REPO_ROOT / "conf"


def config_dir() -> Path:
    """Absolute path of conf/, or a clear error when the package is not an editable install."""
    if not (CONFIG_DIR / "train.yaml").is_file():
        raise FileNotFoundError(
            f"Hydra configs not found at {CONFIG_DIR} (expected conf/train.yaml): install the "
            "package editable from the repository (`pip install -e .`)"
        )
    return CONFIG_DIR
