"""``model=llama`` end to end on CPU: hf and triton branches trained, checked and compared.

A few steps of the tiny config (the interpreter's backward costs seconds per step), through the
compose API and ``train(cfg)``, then the sweep comparison and the LM report on the two run dirs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from safetensors import safe_open

from rmsnorm_kernel.experiment.checkpoint import verify_checkpoint
from rmsnorm_kernel.experiment.compare import compare_runs
from rmsnorm_kernel.experiment.lm_report import REPORT_FILE, lm_report
from rmsnorm_kernel.experiment.paths import config_dir
from rmsnorm_kernel.experiment.run import train

STEPS = 3
LAYERS = 2  # the tiny default's num_hidden_layers


def compose_llama(*overrides: str):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("train", overrides=["model=llama", *overrides])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("llama")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: a second thread only waits on a shared 2-core box
    try:
        for num, norm in enumerate(("hf", "triton")):
            cfg = compose_llama(
                f"norm={norm}",
                f"trainer.max_steps={STEPS}",
                f"trainer.val_check_interval={STEPS}",
                "callbacks.throughput.warmup_steps=1",
                "~callbacks.progress_bar",
                "+trainer.enable_progress_bar=false",
                f"paths.output_dir={root / f'{num}_{norm}'}",
                f"paths.checkpoint_dir={root / 'checkpoints'}",
            )
            train(cfg)
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
        assert m["peak_memory_gib"] is None  # CPU: no allocator statistics
        verify_checkpoint(Path(m["checkpoint"]), sha256=m["checkpoint_sha256"])
    with safe_open(hf["checkpoint"], framework="pt") as f:
        assert json.loads(f.metadata()["net"])["builder"] == "llama"


def test_probe_comparison_and_lm_report(sweep):
    settings = dict(compose_llama().compare)
    result = compare_runs([sweep / "0_hf", sweep / "1_triton"], sweep, settings)
    assert result["passed"], result["failed"]
    triton = result["groups"][0]["branches"]["triton"]
    assert triton["initial_output_error"] <= settings["initial_error_tolerance"]
    report = lm_report(sweep, "hf", "train/loss", settings["curve_tolerance"])
    assert report["passed"], report["failed"]
    branches = report["groups"][0]["branches"]
    assert branches["hf"]["speed_ratio"] == 1.0
    assert branches["triton"]["curve_steps"] == STEPS
    assert (sweep / REPORT_FILE).is_file()
