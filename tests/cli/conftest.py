"""Fixtures of the CLI tests (commands run in-process, outputs under tmp dirs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli


@pytest.fixture(scope="session")
def smoke_checks(tmp_path_factory) -> Path:
    """The three campaigns on the small `smoke` grid, once per session; returns their folder."""
    out = tmp_path_factory.mktemp("checks")
    for command in ("check-forward", "check-backward", "check-weight"):
        code = run_cli(command, "campaign.grids=[smoke]", f"campaign.out_dir={out}")
        assert code == 0, f"{command} failed on the smoke grid"
    return out
