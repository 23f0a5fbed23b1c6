"""The cross-branch comparison: comparison.json, the PNG, the verdict and the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rmsnorm_kernel.experiment.compare import (
    CompareOnMultirunEnd,
    ComparisonError,
    compare_runs,
    find_runs,
)


def _dirs(trained_pair) -> list[Path]:
    return [Path(trained_pair[n]["output_dir"]) for n in ("reference", "triton")]


def test_comparison_of_two_branches(trained_pair, tmp_path):
    result = compare_runs(_dirs(trained_pair), tmp_path)
    saved = json.loads((tmp_path / "comparison.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert (tmp_path / "loss_curves.png").stat().st_size > 10_000
    ref, tri = saved["branches"]["reference"], saved["branches"]["triton"]
    assert (tri["forward_calls"], tri["backward_calls"]) == (10, 10)
    assert (ref["forward_calls"], ref["backward_calls"]) == (0, 0)
    assert ref["reload_max_diff"] == tri["reload_max_diff"] == 0.0
    assert 0 < saved["initial_output_error"]["triton"] < 1e-5
    assert 0 <= saved["initial_grad_error"]["triton"] < 1e-5
    assert saved["delta_test_mse"]["triton"] == tri["test_mse"] - ref["test_mse"]
    assert abs(saved["delta_test_mse"]["triton"]) < 1e-3
    assert saved["passed"] is True and saved["failed"] == []


def test_delta_above_tolerance_fails(trained_pair, tmp_path):
    result = compare_runs(_dirs(trained_pair), tmp_path, delta_test_mse_tolerance=-1.0)
    assert result["passed"] is False
    assert any("delta test MSE" in f for f in result["failed"])


def test_missing_baseline_is_an_error(trained_pair, tmp_path):
    with pytest.raises(ComparisonError, match="baseline branch 'reference' not among"):
        compare_runs(_dirs(trained_pair)[1:], tmp_path)


def _sweep(trained_pair, tmp_path) -> Path:
    """A sweep dir laid out as Hydra's: <num>_<norm>/ per run."""
    for num, d in enumerate(_dirs(trained_pair)):
        (tmp_path / f"{num}_{d.parent.name}").symlink_to(d, target_is_directory=True)
    return tmp_path


def test_hydra_callback_prints_the_path_last_and_exits_non_zero_on_failure(
    trained_pair, tmp_path, capsys
):
    sweep = _sweep(trained_pair, tmp_path)
    assert [p.name for p in find_runs(sweep)] == ["0_reference", "1_triton"]
    config = OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": str(sweep)}},
            "compare": {
                "baseline": "reference",
                "delta_test_mse_tolerance": 1e-3,
                "initial_error_tolerance": 1e-5,
            },
        }
    )
    CompareOnMultirunEnd().on_multirun_end(config)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(sweep / "comparison.json")
    assert "PASSED" in out

    config.compare.delta_test_mse_tolerance = -1.0
    with pytest.raises(SystemExit) as exit_info:
        CompareOnMultirunEnd().on_multirun_end(config)
    assert exit_info.value.code == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(sweep / "comparison.json")


def test_hydra_callback_exits_non_zero_when_nothing_to_compare(tmp_path):
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "compare": {}})
    with pytest.raises(SystemExit) as exit_info:
        CompareOnMultirunEnd().on_multirun_end(config)
    assert exit_info.value.code == 1
