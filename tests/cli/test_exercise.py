"""exercise: the tutorial's BLOCK-denominator figures, and every mutant killed."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import read_json, run_cli

from rmsnorm_kernel.cli.exercise.mutants import MUTANTS, mutant_rmsnorm


@pytest.mark.parametrize("n,expected", [(256, 0.9999995), (257, 1.411458)])
def test_block_mutant_reproduces_the_seeds_table(n, expected, device):
    x, w = torch.ones(1, n, device=device), torch.ones(n, device=device)
    y_mutant = mutant_rmsnorm(1)(x, w, 1e-6).cpu()
    y_control = mutant_rmsnorm(0)(x, w, 1e-6).cpu()
    assert torch.allclose(y_mutant, torch.full_like(y_mutant, expected), atol=1e-6)
    assert torch.allclose(y_control, torch.full_like(y_control, 0.9999995), atol=1e-6)


def test_required_mutants_exist():
    names = {m.name for m in MUTANTS.values()}
    assert {
        "forward-block-mean",
        "backward-block-mean",
        "dweight-row-mean",
        "missing-r3-term",
        "rows-by-block",
        "no-fp32-upcast",
    } <= names


def test_every_mutant_is_killed(tmp_path):
    code = run_cli("exercise", "exercise.grids=[smoke]", f"exercise.out_dir={tmp_path}")
    report = read_json(tmp_path / "exercise.json")
    assert code == 0, report["survivors"]
    assert report["control_passed"] and report["block_demo"]["passed"]
    records = {r["id"]: r for r in report["mutants"]}
    assert set(records) == set(MUTANTS)  # control + all mutants
    assert not records[0]["killed"]
    for mid in set(MUTANTS) - {0}:
        assert records[mid]["killed"], f"mutant {mid} survived"
    first = {mid: records[mid]["first_catch"]["case"] for mid in records if mid}
    assert "N257" in first[1] and "N257" in first[2]  # BLOCK bugs hide at N=256
    assert first[3].startswith("M17")  # sum vs mean needs M > 1
    assert first[5].startswith("M17xN257")  # row addressing needs M > 1 and N != BLOCK
    assert "fp16/wide" in first[6]  # fp16 squares overflow without the upcast


def test_a_surviving_mutant_fails_the_exercise(tmp_path):
    """Only N=256 cases: the BLOCK-denominator mutant survives and the exit code says so."""
    code = run_cli(
        "exercise",
        "+campaign.catalogue.n256=[{m:[1],n:[256],dtype:[float32]}]",
        "exercise.grids=[n256]",
        "exercise.mutants=[1]",
        "exercise.control=false",
        f"exercise.out_dir={tmp_path}",
    )
    assert code == 1
    assert read_json(tmp_path / "exercise.json")["survivors"] == [1]


@pytest.mark.parametrize(
    "override,message",
    [
        # "PASS exercise: 0/0 mutants killed": a pass with nothing tested
        ("exercise.mutants=[]", "exercise.mutants must name at least one mutant"),
        ("exercise.grids=[]", "exercise.grids must name at least one grid"),
        ("exercise.grids=smoke", "exercise.grids must be a list of grid names"),
        ("campaign.eps=0", "campaign.eps must be a finite number > 0"),
        ("campaign.eps=nan", "campaign.eps must be a finite number > 0"),
    ],
)
def test_vacuous_or_bad_config_is_refused_up_front(tmp_path, capsys, override, message):
    """Exit 2 naming the key and the rule before anything runs, and nothing written."""
    out = tmp_path / "out"
    assert run_cli("exercise", "exercise.grids=[smoke]", override, f"exercise.out_dir={out}") == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_empty_out_dir_is_refused(tmp_path, monkeypatch, capsys):
    """``exercise.out_dir=`` wrote exercise.json into the current directory."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("exercise", "exercise.grids=[smoke]", "exercise.out_dir=") == 2
    assert "exercise.out_dir must be a non-empty directory path" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
