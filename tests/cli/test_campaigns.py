"""check-forward / check-backward / check-weight: cases, tolerances, JSON, exit codes."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import read_json, run_cli
from omegaconf import OmegaConf

from rmsnorm_kernel.cli.campaigns.cases import build_cases, make_inputs
from rmsnorm_kernel.cli.campaigns.runner import run_campaign
from rmsnorm_kernel.cli.exercise.mutants import mutant_rmsnorm
from rmsnorm_kernel.cli.main import compose


@pytest.fixture(scope="module")
def cfg():
    return compose()


def test_tutorial_grid_is_the_tutorials_72_cases(cfg):
    cases = build_cases(cfg.campaign.catalogue, ["tutorial"])
    assert len(cases) == 72
    assert {c.m for c in cases} >= {1, 17}
    assert {c.n for c in cases} >= {256, 257, 4096}  # BLOCK == N, BLOCK > N, the tutorial's max
    assert any(c.n & (c.n - 1) for c in cases if c.n not in (257,))  # another non-power of two
    assert {c.dtype for c in cases} == {"float32", "float16"}
    assert {c.inputs for c in cases} == {"unit", "random", "wide"}  # weight = 1 and varied
    assert all(c.tutorial_contract for c in cases)


def test_default_grids_go_beyond_the_tutorial(cfg):
    cases = build_cases(cfg.campaign.catalogue, cfg.campaign.grids)
    assert len(cases) > 72
    assert {"bfloat16", "float64"} <= {c.dtype for c in cases}
    assert max(c.n for c in cases) >= 65536
    assert {"batched", "strided"} <= {c.layout for c in cases}
    assert any(c.residual for c in cases) and any(c.offset for c in cases)
    assert any(c.weight == "none" for c in cases)


@pytest.mark.parametrize(
    "command,override,message",
    [
        (
            "check-forward",
            "campaign.tolerances.float32.atol=-1",
            "campaign.tolerances.float32.atol must be a finite number >= 0",
        ),
        (
            "check-backward",
            "campaign.tolerances.float16.rtol=nan",
            "campaign.tolerances.float16.rtol must be a finite number >= 0",
        ),
        (
            "check-weight",
            "~campaign.tolerances.float64",
            "campaign.tolerances must give exactly the dtypes",
        ),
        (
            "check-forward",
            "campaign.ratio_limit.bfloat16=0",
            "campaign.ratio_limit.bfloat16 must be a finite number > 0",
        ),
        ("check-forward", "campaign.grids=[nope]", "unknown grid 'nope'"),
        (
            "exercise",
            "campaign.tolerances.float16.atol=-1e-3",
            "campaign.tolerances.float16.atol must be",
        ),
        ("exercise", "exercise.mutants=[9]", "exercise.mutants must be ids from"),
        # (these three gave tracebacks, and control=maybe ran as true)
        ("exercise", "exercise.mutants=[nope]", "exercise.mutants must be a list of mutant ids"),
        ("exercise", "exercise.mutants=3", "exercise.mutants must be a list of mutant ids"),
        ("exercise", "exercise.control=maybe", "exercise.control must be true or false"),
        (
            "exercise",
            "exercise.block_demo.n_pass=abc",
            "exercise.block_demo.n_pass must be an integer >= 1 (got 'abc')",
        ),
        ("reference", "campaign.tolerances.float64.rtol=-1", "campaign.tolerances.float64.rtol"),
    ],
)
def test_bad_config_is_refused_before_output(tmp_path, capsys, command, override, message):
    """Exit 2 with the key and the rule, and nothing written."""
    out = tmp_path / "out"
    dirs = [f"campaign.out_dir={out}", f"exercise.out_dir={out}", f"paths.data_dir={out}"]
    assert run_cli(command, override, *dirs) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_inputs_depend_only_on_the_case(cfg):
    case = build_cases(cfg.campaign.catalogue, ["tutorial"])[5]
    a, b = make_inputs(case, "cpu"), make_inputs(case, "cpu")
    assert torch.equal(a.x, b.x) and torch.equal(a.dy, b.dy)
    strided = next(
        c for c in build_cases(cfg.campaign.catalogue, ["beyond"]) if c.layout == "strided"
    )
    x = make_inputs(strided, "cpu").x
    assert not x.is_contiguous() and x.stride() == (strided.n + 64, 1)


@pytest.mark.parametrize(
    "command,quantity",
    [("check-forward", "y"), ("check-backward", "dx"), ("check-weight", "dweight")],
)
def test_campaign_passes_and_writes_json(smoke_checks, command, quantity):
    payload = read_json(smoke_checks / f"{command}.json")
    assert payload["passed"] and payload["quantity"] == quantity
    assert payload["counts"] == {"cases": 16, "passed": 16, "failed": 0, "skipped": 0}
    assert set(payload["summary"]) == {"float32", "float16"}
    for case in payload["cases"]:
        assert case["max_abs_err"] <= case["atol"] + case["rtol"] * 100  # sane magnitude
        assert case["failing_elements"] == 0
        assert case["ratio"] is not None and case["torch_max_abs_err"] >= 0


def test_a_broken_kernel_fails_the_campaign(cfg, tmp_path):
    """Mutant 1 (divides by BLOCK): passes at N=256, fails at N=257, campaign fails."""
    ccfg = OmegaConf.to_container(cfg.campaign, resolve=True)
    ccfg["grids"] = ["smoke"]
    payload = run_campaign("check-forward", ccfg, impl=mutant_rmsnorm(1), out_dir=tmp_path)
    assert not payload["passed"]
    by_n = {}
    for case in payload["cases"]:
        by_n.setdefault(case["n"], set()).add(case["status"])
    assert by_n[256] == {"pass"} and by_n[257] == {"fail"}


def test_exit_code_non_zero_on_failure(tmp_path):
    """A case outside the tolerance makes the command exit non-zero (fp32 atol/rtol of 0)."""
    code = run_cli(
        "check-forward",
        "campaign.grids=[smoke]",
        f"campaign.out_dir={tmp_path}",
        "campaign.tolerances.float32.atol=0",
        "campaign.tolerances.float32.rtol=0",
    )
    assert code == 1
    assert not read_json(tmp_path / "check-forward.json")["passed"]


def test_check_gamma_is_check_weight(tmp_path, smoke_checks):
    """The old name runs the same campaign and writes the same file."""
    assert run_cli("check-gamma", "campaign.grids=[smoke]", f"campaign.out_dir={tmp_path}") == 0
    old, new = (
        read_json(tmp_path / "check-weight.json"),
        read_json(smoke_checks / "check-weight.json"),
    )
    assert old["command"] == "check-weight" and old["quantity"] == "dweight"
    assert [c["max_abs_err"] for c in old["cases"]] == [c["max_abs_err"] for c in new["cases"]]


@pytest.mark.parametrize(
    "command,override,message",
    [
        # campaign.eps: the kernel's rule, up front (each case raised ContractValueError instead,
        # and the command exited 1 after overwriting its JSON)
        ("check-forward", "campaign.eps=0", "campaign.eps must be a finite number > 0"),
        ("check-backward", "campaign.eps=-1", "campaign.eps must be a finite number > 0"),
        ("check-weight", "campaign.eps=abc", "campaign.eps must be a finite number > 0"),
        ("check-gamma", "campaign.eps=1e-40", "campaign.eps must be a finite number > 0"),
        ("check-forward", "campaign.eps=1e39", "campaign.eps must be a finite number > 0"),
        ("check-forward", "campaign.eps=true", "campaign.eps must be a finite number > 0"),
        ("reference", "campaign.eps=0", "campaign.eps must be a finite number > 0"),
        # an empty grid list: "FAIL ... 0 of 0 cases" with a JSON report
        ("check-forward", "campaign.grids=[]", "campaign.grids must name at least one grid"),
        ("check-weight", "campaign.grids=smoke", "campaign.grids must be a list of grid names"),
    ],
)
def test_bad_eps_or_empty_grids_refused_up_front(tmp_path, capsys, command, override, message):
    """Exit 2 naming the key and the rule before any case runs, and nothing written (the smoke
    grid first, so a command that wrongly runs stays quick)."""
    out = tmp_path / "out"
    assert run_cli(command, "campaign.grids=[smoke]", override, f"campaign.out_dir={out}") == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "command", ["check-forward", "check-backward", "check-weight", "reference"]
)
def test_empty_out_dir_is_refused(tmp_path, monkeypatch, capsys, command):
    """``campaign.out_dir=`` wrote the report into the current directory."""
    monkeypatch.chdir(tmp_path)
    assert run_cli(command, "campaign.grids=[smoke]", "campaign.out_dir=") == 2
    assert "campaign.out_dir must be a non-empty directory path" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
