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


def inside_checkout_below_root(cwd: Path | None = None) -> Path | None:
    """The working directory when it lies inside this checkout but is not its root (``src/``,
    ``tests/``...), else None. Runs write ``outputs/`` and ``checkpoints/`` relative to the
    working directory, so from there they would land inside the repository's tracked tree,
    where ``.gitignore`` and ``clean`` do not look."""
    here = Path.cwd() if cwd is None else Path(cwd)
    here, root = here.resolve(), REPO_ROOT.resolve()
    if here != root and root in here.parents and (root / "pyproject.toml").is_file():
        return here
    return None


def below_root_message(here: Path) -> str:
    """The refusal for :func:`inside_checkout_below_root`."""
    return (
        f"working directory {here} is inside the repository but not its root: outputs/ and "
        f"checkpoints/ would be written there; run from the project root {REPO_ROOT.resolve()}"
    )
