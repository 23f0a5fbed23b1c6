"""``experiment=llama`` end to end on CPU: hf and triton branches trained, checked and compared.

A few steps of the tiny config (the interpreter's backward costs seconds per step), through the
compose API and ``train(cfg)``, then the sweep comparison on the two run dirs (with the LM's
curve and throughput checks: lm_comparison.json).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch
from experiment_helpers import one_thread, tiny_llama
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from planted_norms import SEARCHPATH, planted_norm
from safetensors import safe_open

from rmsnorm_kernel.experiment.analysis import (
    REPORT_FILE,
    CompareOnMultirunEnd,
    compare_runs,
    find_runs,
    load_run,
)
from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.experiment.exports.checkpoint import verify_checkpoint
from rmsnorm_kernel.paths import config_dir

STEPS = 3
LAYERS = 2  # the tiny default's num_hidden_layers


def compose_llama(*overrides: str):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        chosen = any(o.startswith("experiment=") for o in overrides)
        return compose("train", overrides=[*([] if chosen else ["experiment=llama"]), *overrides])


def tiny(root: Path, run: str) -> list[str]:
    """The CPU sweep's overrides: STEPS steps, one validation, run dir ``root/run``."""
    return tiny_llama(root, run, STEPS)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("llama")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: a second thread only waits on a shared 2-core box
    try:
        for num, norm in enumerate(("hf", "triton")):
            train(compose_llama(*tiny(root, f"{num}_{norm}"), f"norm={norm}"))
    finally:
        torch.set_num_threads(threads)
    return root


def metrics(sweep: Path, run: str) -> dict:
    return json.loads((sweep / run / "metrics.json").read_text())


def test_composes_the_language_model_setup():
    cfg = compose_llama()
    assert cfg.norm.name == "hf"  # the baseline when no norm is chosen
    assert cfg.dataset._target_.endswith("MarkovLMDataModule")
    assert cfg.compare.baseline == "hf" and cfg.compare.metric == "test/loss"
    assert cfg.callbacks.kernel_calls._target_.endswith("LMKernelCallCounter")
    assert compose_llama("norm=triton", "dataset=synthetic").dataset._target_.endswith(
        "SyntheticDataModule"
    )  # a command-line choice still wins


def test_each_branch_passes_its_checks(sweep):
    hf, triton = metrics(sweep, "0_hf"), metrics(sweep, "1_triton")
    norms = 2 * LAYERS + 1
    assert (hf["forward_calls"], hf["backward_calls"]) == (0, 0)
    assert (triton["forward_calls"], triton["backward_calls"]) == (STEPS * norms,) * 2
    for m in (hf, triton):
        assert m["train_steps"] == STEPS
        assert m["reload_max_diff"] == 0.0 and m["reload_tensor_max_diff"] == 0.0
        assert math.isfinite(m["test/loss"])
        assert m["tokens_per_s"] > 0 and m["step_time_ms"] > 0 and m["timed_steps"] == STEPS - 1
        if m["device"] == "cpu":
            assert m["peak_memory_gib"] is None  # no allocator statistics on the CPU
        else:
            assert m["peak_memory_gib"] > 0
        verify_checkpoint(Path(m["checkpoint"]), sha256=m["checkpoint_sha256"])
    with safe_open(hf["checkpoint"], framework="pt") as f:
        assert json.loads(f.metadata()["net"])["builder"] == "llama"


def test_probe_comparison_and_lm_report(sweep):
    settings = dict(compose_llama().compare)
    result = compare_runs([sweep / "0_hf", sweep / "1_triton"], sweep, settings)
    assert result["passed"], result["failed"]
    triton = result["groups"][0]["branches"]["triton"]
    assert triton["initial_output_error"] <= settings["initial_error_tolerance"]
    report = result["lm"]  # the throughput check's view, written to lm_comparison.json
    assert json.loads((sweep / REPORT_FILE).read_text()) == report
    assert report["passed"], report["failed"]
    branches = report["groups"][0]["branches"]
    assert branches["hf"]["speed_ratio"] == 1.0
    assert branches["triton"]["curve_steps"] == STEPS
    assert (sweep / REPORT_FILE).is_file()


def test_lm_report_fails_a_curve_out_of_tolerance(sweep, tmp_path):
    """A branch whose train/loss sits 0.5 above the baseline's fails the curve check."""
    from torch.utils.tensorboard import SummaryWriter

    bad = tmp_path / "sweep" / "2_bad"
    hf = metrics(sweep, "0_hf")
    steps, values = load_run(sweep / "0_hf").curves["train/loss"]
    writer = SummaryWriter(str(bad / "tb"))
    for step, value in zip(steps, values, strict=True):
        writer.add_scalar("train/loss", value + 0.5, step)
    writer.close()
    bad.mkdir(parents=True, exist_ok=True)
    (bad / "metrics.json").write_text(json.dumps({**hf, "norm": "bad", "log_dir": str(bad / "tb")}))
    (tmp_path / "sweep" / "0_hf").symlink_to(sweep / "0_hf")
    # The LM's compare config with only the curve and throughput checks (no probe in "bad").
    settings = OmegaConf.to_container(compose_llama().compare)
    settings["checks"] = ["curve", "throughput"]
    runs = find_runs(tmp_path / "sweep")
    report = compare_runs(runs, tmp_path / "sweep", settings)["lm"]
    assert not report["passed"]
    assert report["groups"][0]["branches"]["bad"]["max_curve_delta"] == pytest.approx(0.5, abs=1e-6)
    assert len(report["failed"]) == 1 and report["failed"][0].startswith("(all runs) bad:")
    with pytest.raises(ValueError, match="compare.curve_tolerance must be >= 0"):
        compare_runs(runs, tmp_path / "sweep", {**settings, "curve_tolerance": -1.0})


def test_one_callback_prints_both_tables_and_the_comparison_path_last(sweep, capsys):
    compare = compose_llama().compare
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "compare": compare})
    CompareOnMultirunEnd().on_multirun_end(config)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(sweep / "comparison.json")
    assert "LM PASSED" in out and "PASSED" in out
    assert out.index("LM PASSED") < out.index(str(sweep / REPORT_FILE)) < out.index("PASSED")
    saved = json.loads((sweep / "comparison.json").read_text())
    assert "max |delta train/loss|" in {c["name"] for c in saved["groups"][0]["checks"]}


def test_call_counter_counts_every_norm_layer():
    from rmsnorm_kernel.experiment.lm.callbacks import LMKernelCallCounter

    assert LMKernelCallCounter(calls_per_step=1, num_hidden_layers=2).calls_per_step == 5
    assert LMKernelCallCounter(calls_per_step=0, num_hidden_layers=8).calls_per_step == 0


@pytest.mark.parametrize(
    "experiment, hidden, layers, tokens",
    [("llama_h200", 4096, 4, 2 * 4096), ("llama_h200_2048", 2048, 8, 8 * 2048)],
)
def test_llm_width_experiments_compose_to_valid_specs(experiment, hidden, layers, tokens):
    """The GPU configs, checked without building the model (hundreds of millions of weights)."""
    from omegaconf import OmegaConf

    from rmsnorm_kernel.experiment.core.builders import check_spec, spec_of

    cfg = compose_llama(f"experiment={experiment}", "norm=triton_fused")
    net = OmegaConf.to_container(cfg.model.net, resolve=True)
    builder, args = check_spec(spec_of(net))
    assert builder.__name__ == "build_llama" and args["norm"] == "triton_fused"
    assert (args["hidden_size"], args["num_hidden_layers"]) == (hidden, layers)
    assert cfg.dataset.batch_size * cfg.dataset.seq_len == tokens
    assert cfg.dataset.n_train == cfg.trainer.max_steps * cfg.dataset.batch_size
    assert cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.enable_checkpointing is False  # no last.ckpt (~13 GB) unless asked
    assert cfg.callbacks.safetensors_checkpoint is None  # no export unless callbacks=lm
    assert cfg.compare.baseline == "hf"


#: The LLM-width experiments' switches (no Lightning checkpoint, no export), on the tiny Llama.
FAST = ("callbacks=lm_fast", "++trainer.enable_checkpointing=false")


@pytest.fixture(scope="module")
def planted_sweep(sweep, tmp_path_factory) -> tuple[Path, float]:
    """``sweep``'s hf and triton runs plus ``norm=planted_eps`` (hf with eps x 100) with the
    LLM-width switches; returns the sweep dir and the planted run's seconds."""
    root = tmp_path_factory.mktemp("planted")
    for run in ("0_hf", "1_triton"):
        (root / run).symlink_to(sweep / run)
    with one_thread(), planted_norm():
        cfg = compose_llama(*tiny(root, "2_planted_eps"), "norm=planted_eps", SEARCHPATH, *FAST)
        start = time.perf_counter()
        train(cfg)
        seconds = time.perf_counter() - start
        train(compose_llama(*tiny(root, "3_planted_grad"), "norm=planted_grad", SEARCHPATH, *FAST))
    return root, seconds


def test_fast_switches_train_without_checkpoint_or_export(planted_sweep):
    root, seconds = planted_sweep
    run = root / "2_planted_eps"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["train_steps"] == 3 and set(metrics["phase_s"]) == {"build", "fit", "test"}
    assert "checkpoint" not in metrics  # no export recorded
    assert not list(run.rglob("*.ckpt"))
    # The only safetensors file is the comparison's first-batch probe; no export was written.
    assert [p.name for p in run.rglob("*.safetensors")] == ["initial_probe.safetensors"]
    assert not (root / "checkpoints").exists()
    assert seconds < 30


def test_the_lm_criterion_fails_the_planted_branch_and_passes_triton(planted_sweep):
    """One tiny sweep (hf, triton, planted_eps; 3 steps) through the unchanged conf/compare/lm.yaml.

    Measured on CPU: the first-batch probe (the exact check) catches eps x 100 by ~4 orders of
    magnitude (output 7.5e-2, gradients 3.1e-2 against 1e-5), while after 3 steps the loss checks
    do not (|delta test/loss| 1.7e-3 < 1e-2, max |delta train/loss| 1.5e-3 < 2e-2): at this size
    the probe is the check that fails it. Triton passes every check (deltas ~5e-7).
    """
    root, _ = planted_sweep
    settings = dict(compose_llama().compare)
    result = compare_runs(find_runs(root), root, settings)
    assert not result["passed"]
    branches = result["groups"][0]["branches"]
    planted, triton = branches["planted_eps"], branches["triton"]
    tol = settings["initial_error_tolerance"]
    assert [f.split(" = ")[0] for f in result["failed"] if "planted_eps" in f] == [
        "(all runs) planted_eps: initial output error",
        "(all runs) planted_eps: initial grad error",
    ]
    # The wrong dx (no projection term): an exact forward, so the probe's logits agree, but its
    # gradients do not, and after 3 steps the test-loss check fails it too. Its train-loss
    # curve has only drifted 6.6e-3 by then (measured; 0.156 after 6 steps), within 2e-2.
    wrong_dx = branches["planted_grad"]
    assert wrong_dx["initial_output_error"] == 0.0
    assert wrong_dx["initial_grad_error"] > 1000 * tol
    assert abs(wrong_dx["delta"]) > settings["delta_metric_tolerance"]
    assert any(f.startswith("(all runs) planted_grad: |delta test/loss|") for f in result["failed"])
    assert planted["initial_output_error"] > 1000 * tol
    assert planted["initial_grad_error"] > 1000 * tol
    # What the loss checks see of it at 3 tiny steps: a real difference, but within tolerance.
    assert 1e-4 < abs(planted["delta"]) <= settings["delta_metric_tolerance"]
    assert 1e-4 < planted["max_curve_delta"] <= settings["curve_tolerance"]
    assert triton["initial_output_error"] <= tol and triton["initial_grad_error"] <= tol
    assert abs(triton["delta"]) < 1e-5 and triton["max_curve_delta"] < 1e-5
    assert result["lm"]["failed"] == []  # the curve check passes every branch at 3 steps
