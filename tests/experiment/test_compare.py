"""The one comparison path (experiment/analysis/): groups, summary across seeds, comparison.json,
PNG, exit code; the configured checks; the commands `compare` and `equivalence`, whose
tolerances come from conf/compare/ only."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from experiment_helpers import compose_cfg
from omegaconf import OmegaConf

from rmsnorm_kernel.cli.main import main as cli
from rmsnorm_kernel.experiment.analysis import (
    CompareOnMultirunEnd,
    ComparisonError,
    compare_runs,
    find_runs,
)
from rmsnorm_kernel.experiment.core.settings import SettingsError
from rmsnorm_kernel.paths import config_dir


@pytest.fixture(scope="module")
def settings() -> dict:
    """The compare settings exactly as conf/compare/default.yaml defines them."""
    return OmegaConf.to_container(compose_cfg(small=False).compare)


def _dirs(trained_pair) -> list[Path]:
    return [Path(trained_pair[n]["output_dir"]) for n in ("reference", "triton")]


def _clone(run_dir: Path, dst: Path, **overrides: str) -> Path:
    """A copy of a run whose metrics.json records other command-line overrides."""
    shutil.copytree(run_dir, dst, ignore=shutil.ignore_patterns("lightning_checkpoints"))
    metrics = json.loads((dst / "metrics.json").read_text())
    metrics["overrides"] = {"norm": metrics["norm"], **overrides}
    (dst / "metrics.json").write_text(json.dumps(metrics))
    return dst


def test_one_axis_sweep_is_one_group(trained_pair, tmp_path, settings):
    result = compare_runs(_dirs(trained_pair), tmp_path, settings)
    saved = json.loads((tmp_path / "comparison.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert (tmp_path / "loss_curves.png").stat().st_size > 10_000
    assert saved["swept"] == [] and len(saved["groups"]) == 1
    group = saved["groups"][0]
    assert group["overrides"] == {} and group["passed"] is True
    ref, tri = group["branches"]["reference"], group["branches"]["triton"]
    # Recorded by the runs' callbacks, shown as recorded.
    assert (tri["forward_calls"], tri["backward_calls"]) == (10, 10)
    assert (ref["forward_calls"], ref["backward_calls"]) == (0, 0)
    assert ref["reload_max_diff"] == tri["reload_max_diff"] == 0.0
    assert tri["test/mse"] == trained_pair["triton"]["test/mse"]
    assert tri["delta"] == tri["test/mse"] - ref["test/mse"]
    assert abs(tri["delta"]) <= settings["delta_metric_tolerance"]
    assert 0 < tri["initial_output_error"] <= settings["initial_error_tolerance"]
    assert 0 <= tri["initial_grad_error"] <= settings["initial_error_tolerance"]
    (summary,) = saved["summary"]
    assert summary["branches"]["triton"]["paired_delta_max_abs"] == abs(tri["delta"])
    assert saved["passed"] is True and saved["failed"] == []


def test_a_curve_no_run_logged_is_an_error_not_an_empty_plot(trained_pair, tmp_path, settings):
    """A misspelled compare.curve used to PASS with empty axes (the curve check, not a default
    one, is what would refuse it); nothing is written."""
    with pytest.raises(ComparisonError, match=r"compare.curve='train/los': not logged by 2 of 2"):
        compare_runs(_dirs(trained_pair), tmp_path / "out", {**settings, "curve": "train/los"})
    assert not (tmp_path / "out").exists()


def test_a_check_above_its_tolerance_fails_the_group(trained_pair, tmp_path, settings):
    result = compare_runs(_dirs(trained_pair), tmp_path, {**settings, "initial_error_tolerance": 0})
    assert result["passed"] is False and result["groups"][0]["passed"] is False
    assert any("triton: initial output error" in f for f in result["failed"])


def test_groups_by_swept_overrides_and_summarises_seeds(trained_pair, tmp_path, settings):
    ref, tri = _dirs(trained_pair)
    runs = [
        _clone(run, tmp_path / f"{i}_{run.name}", seed=seed, lr=lr)
        for i, (seed, lr, run) in enumerate(
            (s, lr, r) for s in ("0", "1") for lr in ("0.1", "0.2") for r in (ref, tri)
        )
    ]
    result = compare_runs(runs, tmp_path / "out", settings)
    assert result["swept"] == ["seed", "lr"]
    assert [g["overrides"] for g in result["groups"]] == [
        {"seed": "0", "lr": "0.1"},
        {"seed": "0", "lr": "0.2"},
        {"seed": "1", "lr": "0.1"},
        {"seed": "1", "lr": "0.2"},
    ]
    assert all(set(g["branches"]) == {"reference", "triton"} for g in result["groups"])
    # Across seeds: one summary per learning rate, two seeds each.
    assert [s["overrides"] for s in result["summary"]] == [{"lr": "0.1"}, {"lr": "0.2"}]
    tri_summary = result["summary"][0]["branches"]["triton"]
    mse = trained_pair["triton"]["test/mse"]
    assert tri_summary["n"] == 2 and tri_summary["mean"] == mse and tri_summary["std"] == 0.0
    delta = mse - trained_pair["reference"]["test/mse"]
    assert tri_summary["paired_delta_mean"] == delta
    assert tri_summary["paired_delta_max_abs"] == abs(delta)
    assert "paired_delta_mean" not in result["summary"][0]["branches"]["reference"]


def test_a_group_without_the_baseline_is_an_error_naming_it(trained_pair, tmp_path, settings):
    ref, tri = _dirs(trained_pair)
    runs = [
        _clone(ref, tmp_path / "0_ref", seed="0"),
        _clone(tri, tmp_path / "1_tri", seed="0"),
        _clone(tri, tmp_path / "2_tri", seed="1"),
    ]
    with pytest.raises(ComparisonError, match="group seed=1 has no baseline branch 'reference'"):
        compare_runs(runs, tmp_path / "out", settings)


def test_two_runs_of_one_norm_in_a_group_is_an_error(trained_pair, tmp_path, settings):
    ref, _ = _dirs(trained_pair)
    runs = [_clone(ref, tmp_path / "0_a", seed="0"), _clone(ref, tmp_path / "1_b", seed="0")]
    with pytest.raises(ComparisonError, match=r"\(all runs\): two runs of norm 'reference'"):
        compare_runs(runs, tmp_path / "out", settings)


def test_a_group_of_the_baseline_alone_is_an_error_not_a_pass(trained_pair, tmp_path, settings):
    """A sweep without norm=... (or of one norm) used to print PASSED: nothing was compared."""
    ref, _ = _dirs(trained_pair)
    runs = [_clone(ref, tmp_path / "0_ref", seed="0"), _clone(ref, tmp_path / "1_ref", seed="1")]
    with pytest.raises(ComparisonError, match="group seed=0 has only its baseline branch"):
        compare_runs(runs, tmp_path / "out", settings)


def test_runs_that_trained_no_steps_are_an_error_not_a_pass(trained_pair, tmp_path, settings):
    """train=false runs (untrained nets, no call counts) used to print PASSED."""
    runs = [_clone(d, tmp_path / f"{i}_run") for i, d in enumerate(_dirs(trained_pair))]
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        del metrics["train_steps"]  # what a train=false run records: no training keys
        (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(ComparisonError, match=r"it trained no steps \(train_steps None"):
        compare_runs(runs, tmp_path / "out", settings)


def test_another_metric_is_read_from_the_runs_records(trained_pair, tmp_path, settings):
    with pytest.raises(ComparisonError, match="metrics.json records no 'test/loss'"):
        compare_runs(_dirs(trained_pair), tmp_path, {**settings, "metric": "test/loss"})


def _sweep(trained_pair, tmp_path) -> Path:
    """A sweep dir laid out as Hydra's: <num>_<norm>/ per run."""
    for num, d in enumerate(_dirs(trained_pair)):
        (tmp_path / f"{num}_{d.parent.name}").symlink_to(d, target_is_directory=True)
    return tmp_path


def test_hydra_callback_prints_the_path_last_and_exits_non_zero_on_failure(
    trained_pair, tmp_path, capsys, settings
):
    sweep = _sweep(trained_pair, tmp_path)
    assert [p.name for p in find_runs(sweep)] == ["0_reference", "1_triton"]
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "compare": settings})
    CompareOnMultirunEnd().on_multirun_end(config)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(sweep / "comparison.json")
    assert "PASSED" in out
    assert any(line.startswith("triton ") for line in out)  # one group: no group column

    config.compare.initial_error_tolerance = 0.0
    with pytest.raises(SystemExit) as exit_info:
        CompareOnMultirunEnd().on_multirun_end(config)
    assert exit_info.value.code == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(sweep / "comparison.json")


def test_hydra_callback_exits_non_zero_when_nothing_to_compare(tmp_path, settings):
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "compare": settings})
    with pytest.raises(SystemExit) as exit_info:
        CompareOnMultirunEnd().on_multirun_end(config)
    assert exit_info.value.code == 1


def test_the_checks_are_the_configured_ones(trained_pair, tmp_path, settings):
    """compare.checks selects the checks; the curve check needs its tolerance from the config."""
    result = compare_runs(_dirs(trained_pair), tmp_path, {**settings, "checks": ["metric_delta"]})
    tri = result["groups"][0]["branches"]["triton"]
    assert "delta" in tri and "initial_output_error" not in tri
    names = {c["name"] for c in result["groups"][0]["checks"]}
    assert names == {"same seed as baseline", "same train steps as baseline", "|delta test/mse|"}
    with pytest.raises(SettingsError, match="compare.curve_tolerance must be a finite number"):
        compare_runs(_dirs(trained_pair), tmp_path, {**settings, "checks": ["curve"]})
    with pytest.raises(SettingsError, match="compare.checks must be a non-empty list"):
        compare_runs(_dirs(trained_pair), tmp_path, {**settings, "checks": ["speed"]})
    curve = {**settings, "checks": ["curve"], "curve_tolerance": 0.0}
    result = compare_runs(_dirs(trained_pair), tmp_path, curve)
    tri = result["groups"][0]["branches"]["triton"]
    assert tri["curve_steps"] == 10 and result["passed"] is (tri["max_curve_delta"] == 0.0)
    assert not (tmp_path / "lm_comparison.json").exists()  # only with the throughput check


def test_compare_command_rejudges_a_sweep_with_its_own_config(trained_pair, tmp_path, capsys):
    sweep = _sweep(trained_pair, tmp_path)
    compare = OmegaConf.to_yaml(OmegaConf.create({"compare": compose_cfg(small=False).compare}))
    (sweep / "multirun.yaml").write_text(compare)
    assert cli(["compare", str(sweep)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "PASSED" in out and out[-1] == str(sweep / "comparison.json")
    assert cli(["compare", str(sweep), "compare.initial_error_tolerance=0"]) == 1
    assert json.loads((sweep / "comparison_rejudged.json").read_text())["passed"] is False
    assert cli(["compare", str(sweep), "compare.initial_error_tolerance=-1"]) == 2
    assert cli(["compare", str(sweep), "compare.nope=1"]) == 2


def test_compare_command_with_overrides_keeps_the_sweeps_own_verdict(
    trained_pair, tmp_path, capsys
):
    """Judged again with other tolerances, a sweep keeps the comparison.json and PNG written when
    it ran; the new verdict goes beside them, with _rejudged in its names."""
    sweep = _sweep(trained_pair, tmp_path)
    compare = OmegaConf.to_yaml(OmegaConf.create({"compare": compose_cfg(small=False).compare}))
    (sweep / "multirun.yaml").write_text(compare)
    assert cli(["compare", str(sweep)]) == 0  # the sweep's own verdict, as at its end
    original = (sweep / "comparison.json").read_bytes()
    figure = (sweep / "loss_curves.png").read_bytes()
    capsys.readouterr()
    assert cli(["compare", str(sweep), "compare.initial_error_tolerance=0"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(sweep / "comparison_rejudged.json")
    assert f"curves: {sweep / 'loss_curves_rejudged.png'}" in out
    assert (sweep / "comparison.json").read_bytes() == original
    assert json.loads(original)["passed"] is True
    assert (sweep / "loss_curves.png").read_bytes() == figure
    rejudged = json.loads((sweep / "comparison_rejudged.json").read_text())
    assert rejudged["passed"] is False and rejudged["tolerances"]["initial_error"] == 0
    assert rejudged["comparison"] == str(sweep / "comparison_rejudged.json")
    assert (sweep / "loss_curves_rejudged.png").stat().st_size > 10_000


def _one_run_sweep(run_dir: Path, dst: Path, **changes) -> Path:
    """A sweep dir holding one copy of ``run_dir`` whose metrics.json differs by ``changes``."""
    run = dst / "0_run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("lightning_checkpoints"))
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**metrics, **changes}))
    return dst


def test_equivalence_tolerances_come_from_the_compare_config(trained_pair, tmp_path, capsys):
    """The same two sweeps pass with conf/compare/default.yaml's tolerances and fail once the
    config's equivalence.metric_abs is tightened: no tolerance is written in code."""
    ref = Path(trained_pair["reference"]["output_dir"])
    mse = trained_pair["reference"]["test/mse"]
    ddp = _one_run_sweep(ref, tmp_path / "ddp", **{"test/mse": mse + 5e-6, "world_size": 2})
    single = _one_run_sweep(ref, tmp_path / "single")
    out = tmp_path / "equivalence.json"
    assert cli(["equivalence", str(ddp), str(single), "--out", str(out)]) == 0
    (pair,) = json.loads(out.read_text())["pairs"]
    assert pair["world_size"] == [2, 1] and pair["metric"] == "test/mse"
    assert pair["metric_abs"] == pytest.approx(5e-6, abs=1e-12)
    assert pair["curve_max_abs"] == {"train/loss": 0.0, "val/loss": 0.0}
    assert pair["weight_max_abs"] == 0.0 and pair["passed"] is True
    section = OmegaConf.to_container(compose_cfg(small=False).compare.equivalence)
    limits = ("curve_max_abs", "metric_abs", "weight_max_abs")
    assert pair["tolerances"] == {k: section[k] for k in limits}
    assert capsys.readouterr().out.strip().splitlines()[-1] == "PASSED"

    conf = tmp_path / "conf"
    shutil.copytree(config_dir(), conf)
    default = conf / "compare" / "default.yaml"
    text, n = re.subn(r"(?m)^(  metric_abs:) 1\.0e-5", r"\1 1.0e-6", default.read_text())
    assert n == 1
    default.write_text(text)
    assert cli(["equivalence", str(ddp), str(single), "--config-dir", str(conf)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("FAILED (tolerances")
    assert cli(["equivalence", str(ddp), str(single), "compare.equivalence.metric_abs=-1"]) == 2


def _save_compare(run_dir: Path, compare: dict) -> None:
    """What Hydra saves with a run: its config, here only the compare section."""
    (run_dir / ".hydra").mkdir(exist_ok=True)
    OmegaConf.save(OmegaConf.create({"compare": compare}), run_dir / ".hydra" / "config.yaml")


def test_each_group_is_judged_with_its_runs_own_compare_config(trained_pair, tmp_path, settings):
    """A sweep over experiments (``experiment=a,b``): the sweep-level config is the default
    experiment's (here naming a baseline no run has); each group is judged with the compare
    section its runs were configured with, and records the tolerances it used."""
    runs = []
    for exp, tol in (("a", settings["delta_metric_tolerance"]), ("b", 0.5)):
        for norm in ("reference", "triton"):
            run = _clone(
                Path(trained_pair[norm]["output_dir"]), tmp_path / f"{exp}_{norm}", experiment=exp
            )
            _save_compare(run, dict(settings, delta_metric_tolerance=tol))
            runs.append(run)
    sweep_level = dict(settings, baseline="hf")
    with pytest.raises(ComparisonError, match="no baseline branch 'hf'"):
        compare_runs(runs, tmp_path / "out0", sweep_level)
    result = compare_runs(runs, tmp_path / "out1", sweep_level, per_run=True)
    assert result["passed"] and [g["overrides"] for g in result["groups"]] == [
        {"experiment": "a"},
        {"experiment": "b"},
    ]
    assert [g["tolerances"]["delta_metric"] for g in result["groups"]] == [
        settings["delta_metric_tolerance"],
        0.5,
    ]
    # Runs of one group configured differently cannot be judged together.
    _save_compare(runs[1], dict(settings, delta_metric_tolerance=0.25))
    with pytest.raises(ComparisonError, match="different compare sections"):
        compare_runs(runs, tmp_path / "out2", sweep_level, per_run=True)


def test_equivalence_refuses_a_first_sweep_of_one_process_or_equal_world_sizes(
    trained_pair, tmp_path, capsys
):
    """Two one-process sweeps used to print "1 vs 1 processes ... PASSED": the first sweep must
    be the DDP one (world_size > 1) and the second must differ from it; exit 2 before writing."""
    ref = Path(trained_pair["reference"]["output_dir"])
    assert trained_pair["reference"]["world_size"] == 1
    one_a = _one_run_sweep(ref, tmp_path / "one_a")
    one_b = _one_run_sweep(ref, tmp_path / "one_b")
    ddp = _one_run_sweep(ref, tmp_path / "ddp", world_size=2)
    ddp_too = _one_run_sweep(ref, tmp_path / "ddp_too", world_size=2)
    out = tmp_path / "equivalence.json"
    for first, second, names in (
        (one_a, one_b, ("ddp_sweep", "world_size > 1", "world_size 1")),
        (one_a, ddp, ("ddp_sweep", "world_size > 1", "world_size 1")),  # arguments swapped
        (ddp, ddp_too, ("single_sweep", "another world size", "world_size 2 in both")),
    ):
        assert cli(["equivalence", str(first), str(second), "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and not out.exists()
        (line,) = captured.err.strip().splitlines()
        assert line.startswith("error: ") and all(n in line for n in names), line
    assert cli(["equivalence", str(ddp), str(one_a), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["pairs"][0]["world_size"] == [2, 1]


def _launched_from(run: Path, cwd: Path) -> None:
    """What Hydra saves with a run: the directory it was launched from."""
    (run / ".hydra").mkdir(exist_ok=True)
    hydra = {"hydra": {"runtime": {"cwd": str(cwd)}}}
    OmegaConf.save(OmegaConf.create(hydra), run / ".hydra" / "hydra.yaml")


def test_equivalence_reads_a_relative_checkpoint_from_the_launch_dir(
    trained_pair, tmp_path, monkeypatch, capsys
):
    """metrics.json records the export relative to where the sweep was launched (the default
    paths.checkpoint_dir=checkpoints); from another directory it is found through the launch
    dir Hydra saved (hydra.runtime.cwd), else the error names the run and every path tried."""
    ref = Path(trained_pair["reference"]["output_dir"])
    checkpoint = Path(trained_pair["reference"]["checkpoint"])
    launch = checkpoint.parent.parent  # the runs wrote <launch>/ckpt/<file>
    relative = str(checkpoint.relative_to(launch))
    ddp = _one_run_sweep(ref, tmp_path / "ddp", world_size=2, checkpoint=relative)
    single = _one_run_sweep(ref, tmp_path / "single", checkpoint=relative)
    for sweep in (ddp, single):
        _launched_from(sweep / "0_run", launch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert not Path(relative).exists()
    out = tmp_path / "equivalence.json"
    assert cli(["equivalence", str(ddp), str(single), "--out", str(out)]) == 0
    (pair,) = json.loads(out.read_text())["pairs"]
    assert pair["weight_max_abs"] == 0.0 and pair["passed"] is True
    capsys.readouterr()

    _launched_from(ddp / "0_run", tmp_path / "gone")  # launched from a dir since removed
    assert cli(["equivalence", str(ddp), str(single)]) == 1
    err = capsys.readouterr().err
    assert f"run {ddp / '0_run'}: its checkpoint {relative}" in err
    assert str(tmp_path / "gone" / relative) in err and str(elsewhere / relative) in err
