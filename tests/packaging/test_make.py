"""The Makefile: `make help` describes every target, and each target runs a command that exists.

Targets are read with ``make -n`` (print, run nothing) with the venv stamp up to date, so the
output is the target's own command line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = re.compile(r"-m rmsnorm_kernel\.cli (\S+)")


def _make(*args: str) -> str:
    # `-o`: treat the venv stamp as up to date, so setup's recipe is not printed.
    res = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def _phony() -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith(".PHONY:")]
    return line.split(":", 1)[1].split()


def _cli_commands() -> set[str]:
    res = subprocess.run(
        [sys.executable, "-m", "rmsnorm_kernel.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return set(re.findall(r"^    (\S+)", res.stdout, flags=re.M))


def test_help_describes_every_target():
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    # "  make a, b   description": the names column ends at the first run of two spaces.
    names = [re.match(r"\s+make (.+?)\s{2,}\S", line) for line in out.splitlines()]
    described = {n for m in names if m for n in m.group(1).split(", ")}
    assert set(_phony()) <= described, set(_phony()) - described


def test_every_cli_target_names_an_existing_command():
    commands = _cli_commands()
    called = {}
    for target in _phony():
        if target in {"help", "lock", "setup", "clean", "docker-build"}:
            continue  # clean is checked below; the others call no CLI command
        called[target] = CLI.findall(_make(target))
    assert called["check-checkpoints"] == ["check-checkpoints"]
    missing = {t: c for t, cmds in called.items() for c in cmds if c not in commands}
    assert not missing, f"Make targets call CLI commands that do not exist: {missing}"
    assert CLI.findall(_make("clean", "DRY_RUN=1")) == ["clean"]


@pytest.mark.parametrize(
    ("alias", "target"), [("reload-check", "check-checkpoints"), ("check-gamma", "check-weight")]
)
def test_aliases_run_the_same_command(alias, target):
    assert _make(alias, "CKPT=a.safetensors") == _make(target, "CKPT=a.safetensors")


@pytest.mark.parametrize(
    "arg,dry", [("DRY_RUN=1", True), ("DRY_RUN=yes", True), ("DRY_RUN=0", False), ("", False)]
)
def test_clean_lists_only_when_dry_run_says_so(arg, dry):
    """DRY_RUN=0 used to list too (any value counted), and is now a real clean."""
    out = _make("clean", *([arg] if arg else []))
    (line,) = [ln for ln in out.splitlines() if "rmsnorm_kernel.cli clean" in ln]
    assert line.strip().endswith("--dry-run") is dry  # (under `make test`: make[1] lines too)


@pytest.mark.parametrize("arg", ["DRYRUN=1", "DRY=1", "DRY_RUN=maybe"])
def test_clean_refuses_a_misspelt_dry_run_instead_of_deleting(arg):
    """`make clean DRYRUN=1` (a typo) deleted every generated file and export."""
    res = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", "clean", arg],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode != 0 and "nothing deleted" in res.stderr
    assert "rmsnorm_kernel.cli clean" not in res.stdout
