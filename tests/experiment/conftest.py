"""Fixtures of the experiment tests (helpers in experiment_helpers.py)."""

from __future__ import annotations

import pytest
from experiment_helpers import run


@pytest.fixture(scope="session")
def trained_pair(tmp_path_factory) -> dict[str, dict]:
    """Short reference and triton runs (10 steps, seed 0), shared by reload and compare tests.

    Both export into one checkpoint folder (``<root>/ckpt``, with its index.json).
    """
    root = tmp_path_factory.mktemp("pair")
    return {
        norm: run(
            root / norm,
            f"norm={norm}",
            "trainer.max_steps=10",
            "trainer.val_check_interval=5",
            f"paths.checkpoint_dir={root / 'ckpt'}",
        )
        for norm in ("reference", "triton")
    }
