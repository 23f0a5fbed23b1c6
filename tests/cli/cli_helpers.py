"""Helpers for the CLI tests: run a command in-process and read what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

from rmsnorm_kernel.cli.main import main


def run_cli(*argv: str) -> int:
    return main(list(argv))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())
