"""``trainer=ddp`` on CPU (gloo, 2 processes): 2 x batch 16 trains like 1 x batch 32.

For both norm branches, the DDP runs (a ``--multirun`` through ``python -m rmsnorm_kernel.train``
and one ``train(cfg)`` call) are compared with one-process runs of the same config at batch 32:
the train/loss and val/loss curves, test/mse and the exported weights. Under DDP the checks still
hold: kernel calls counted per rank, one export and one index entry per run (rank 0), test/mse
reduced over both ranks, one metrics.json, and the sweep comparison passes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from experiment_helpers import ENV, compose_cfg, run, train_command
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import rmsnorm_kernel
from rmsnorm_kernel.cli.main import main as cli_main
from rmsnorm_kernel.experiment.analysis import load_run
from rmsnorm_kernel.experiment.analysis.checks import equivalence_pair
from rmsnorm_kernel.experiment.analysis.tolerances import equivalence_settings
from rmsnorm_kernel.experiment.core.callbacks import CheckFailed
from rmsnorm_kernel.experiment.core.data import ResumableBatches
from rmsnorm_kernel.experiment.core.processes import processes_to_start
from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.experiment.core.settings import SettingsError
from rmsnorm_kernel.paths import config_dir

# The tolerances (float32 reduction order only) are fixed in conf/compare/default.yaml
# (`equivalence:`); the check and `python -m rmsnorm_kernel.cli equivalence` read them from there.
EQUIVALENCE = equivalence_settings(OmegaConf.to_container(compose_cfg(small=False).compare))
TOLERANCES = EQUIVALENCE["tolerances"]


def compare_runs(ddp: dict, single: dict) -> dict:
    """The DDP equivalence check of two runs, given their metrics (which name their run dirs)."""
    runs = [load_run(Path(m["output_dir"])) for m in (ddp, single)]
    return equivalence_pair(*runs, EQUIVALENCE)


# These runs put the triton branch on CPU tensors (gloo, trainer.accelerator=cpu), which only
# Triton's interpreter accepts; compiled kernels refuse CPU tensors by contract. On a CUDA machine
# experiments/ddp/run_h200x2.sh runs the same equivalence on GPUs.
pytestmark = pytest.mark.skipif(
    rmsnorm_kernel.BACKEND != "interpreter",
    reason="CPU DDP runs the kernels on CPU tensors (Triton's interpreter)",
)

STEPS = 6
DDP = ("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "dataset.batch_size=16")
COMMON = (
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=3",
    # 63 test rows: the ranks hold 32 and 31, so a mean of the ranks' means would be wrong.
    "dataset.n_test=63",
    # Plain SGD: its step is proportional to the gradient, so a sum across ranks where an
    # average belongs would show; Adam divides the scale out and would hide it.
    "model.optimizer._target_=torch.optim.SGD",
    "model.optimizer.lr=0.1",
)
NORMS = ("reference", "triton")


def test_ranks_split_each_step_batch_without_overlap():
    x = torch.arange(64.0).unsqueeze(1)  # row i holds the value i
    one = list(ResumableBatches(x, x, batch_size=32, shuffle_seed=3, num_replicas=1, rank=0))
    ranks = [
        list(ResumableBatches(x, x, batch_size=16, shuffle_seed=3, num_replicas=2, rank=r))
        for r in (0, 1)
    ]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == 2
    for step, (bx, _) in enumerate(one):
        union = torch.cat([ranks[0][step][0], ranks[1][step][0]])
        assert torch.equal(union, bx)  # the same rows, in the same order


def test_cpu_ddp_needs_a_process_count_before_any_output(tmp_path):
    cfg = compose_cfg(["trainer=ddp", "trainer.accelerator=cpu"], tmp_path)
    with pytest.raises(ValueError, match="trainer.devices"):
        train(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("split", ["n_val", "n_test"])
def test_ddp_needs_a_sample_per_rank_in_each_eval_split_before_any_output(split, tmp_path):
    # One test sequence on 2 GPUs failed in one rank's sampler and hung the other in NCCL.
    cfg = compose_cfg(
        ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=3", f"dataset.{split}=2"],
        tmp_path,
    )
    with pytest.raises(SettingsError, match=rf"dataset.{split} must be >= the number of processes"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_processes_started_here_only_without_a_cluster(monkeypatch):
    trainer = compose_cfg(["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=3"]).trainer
    for name in ("LOCAL_RANK", "SLURM_NTASKS", "SLURM_JOB_NAME", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    assert processes_to_start(trainer) == 3
    assert processes_to_start(compose_cfg(["trainer.devices=1"]).trainer) == 1  # no DDP
    with monkeypatch.context() as m:  # srun started one task per device: train where we are
        m.setenv("SLURM_NTASKS", "3")
        m.setenv("SLURM_JOB_NAME", "train")
        assert processes_to_start(trainer) == 1
    with monkeypatch.context() as m:  # a child of spawn() (or torchrun)
        m.setenv("LOCAL_RANK", "1")
        assert processes_to_start(trainer) == 1
    trainer.num_nodes = 2
    with pytest.raises(ValueError, match="trainer.num_nodes"):
        processes_to_start(trainer)


def test_slurm_launcher_composes_with_ddp():
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "trainer=ddp",
                "hydra/launcher=slurm",
                "hydra.launcher.gpus_per_node=2",
                "hydra.launcher.tasks_per_node=2",
            ],
            return_hydra_config=True,
        )
    assert cfg.trainer.strategy == "ddp" and cfg.trainer.devices == -1
    assert cfg.hydra.launcher.gpus_per_node == cfg.hydra.launcher.tasks_per_node == 2


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict[str, dict]:
    """One process, batch 32, each branch."""
    root = tmp_path_factory.mktemp("single")
    return {n: run(root / n, f"norm={n}", *COMMON) for n in NORMS}


@pytest.fixture(scope="module")
def ddp_sweep(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m rmsnorm_kernel.train --multirun trainer=ddp ... norm=reference,triton``."""
    root = tmp_path_factory.mktemp("ddp_sweep")
    cmd = train_command(
        *COMMON,
        *DDP,
        f"norm={','.join(NORMS)}",
        f"hydra.sweep.dir={root / 'sweep'}",
        f"paths.checkpoint_dir={root / 'ckpt'}",
        multirun=True,
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=root, env=ENV)
    return proc, root


def _sweep_runs(root: Path) -> dict[str, dict]:
    runs = {}
    for path in sorted((root / "sweep").glob("*/metrics.json")):
        metrics = json.loads(path.read_text())
        runs[metrics["norm"]] = metrics
    return runs


def test_ddp_sweep_runs_every_check_once_and_compares(ddp_sweep):
    proc, root = ddp_sweep
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    comparison = json.loads(Path(lines[-1]).read_text())
    assert comparison["passed"] and set(comparison["groups"][0]["branches"]) == set(NORMS)
    runs = _sweep_runs(root)
    assert set(runs) == set(NORMS)
    for norm, metrics in runs.items():
        calls = STEPS if norm == "triton" else 0
        assert metrics["world_size"] == 2 and metrics["train_steps"] == STEPS
        # each rank ran every step through its own kernel wrapper (or never, for reference)
        assert metrics["forward_calls_per_rank"] == [calls, calls]
        assert metrics["backward_calls_per_rank"] == [calls, calls]
        assert metrics["reload_max_diff"] == 0.0
        assert (Path(metrics["output_dir"]) / "initial_probe.safetensors").is_file()
    # one export per run, written and indexed by rank 0 only
    index = json.loads((root / "ckpt" / "index.json").read_text())["files"]
    assert sorted(index) == sorted(Path(m["checkpoint"]).name for m in runs.values())
    assert sorted(p.name for p in (root / "ckpt").glob("*.safetensors")) == sorted(index)


@pytest.mark.parametrize("norm", NORMS)
def test_two_processes_of_16_train_like_one_of_32(norm, ddp_sweep, single):
    proc, root = ddp_sweep
    assert proc.returncode == 0, proc.stderr[-4000:]
    ddp, one = _sweep_runs(root)[norm], single[norm]
    result = compare_runs(ddp, one)
    assert result["world_size"] == [2, 1]
    assert max(result["curve_max_abs"].values()) <= TOLERANCES["curve_max_abs"], result
    assert result["metric_abs"] <= TOLERANCES["metric_abs"], result
    assert result["weight_max_abs"] <= TOLERANCES["weight_max_abs"], result
    assert result["passed"]


def test_equivalence_command_pairs_two_sweeps_by_norm(ddp_sweep, single, tmp_path):
    proc, root = ddp_sweep
    assert proc.returncode == 0, proc.stderr[-4000:]
    one_process = tmp_path / "single_sweep"  # the one-process runs laid out as a sweep dir
    one_process.mkdir()
    for i, norm in enumerate(NORMS):
        (one_process / f"{i}_{norm}").symlink_to(single[norm]["output_dir"])
    out = tmp_path / "equivalence.json"
    assert cli_main(["equivalence", str(root / "sweep"), str(one_process), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["passed"] and [p["norm"] for p in result["pairs"]] == sorted(NORMS)


def test_train_cfg_starts_the_processes_itself(ddp_sweep, tmp_path):
    """The same DDP config through ``train(cfg)`` (as tests and notebooks call it) ends bitwise
    where the command line's run ended."""
    proc, root = ddp_sweep
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = run(tmp_path, "norm=triton", *COMMON, *DDP)
    assert metrics["world_size"] == 2 and metrics["forward_calls_per_rank"] == [STEPS, STEPS]
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["test/mse"] == metrics["test/mse"]
    cli = _sweep_runs(root)["triton"]
    assert metrics["test/mse"] == cli["test/mse"]
    assert compare_runs(metrics, cli)["weight_max_abs"] == 0.0


def test_a_failed_check_in_the_children_fails_train_with_its_type(tmp_path):
    # The triton branch makes 1 call per step; asking for 2 must fail the kernel-call check in
    # every rank, and the parent raises the check's own error type.
    with pytest.raises(CheckFailed, match="kernel calls"):
        run(tmp_path, "norm=triton", "norm.calls_per_step=2", "trainer.max_steps=1", *DDP)
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_sigterm_stops_every_rank_after_the_same_step_and_resumes(tmp_path):
    """SIGTERM to the process group of a DDP run (as `timeout` or a terminal sends it): every
    rank stops after the same step, last.ckpt is saved, the run exits 143; it then resumes."""
    steps = 300  # PyTorch's norm: the kernels are not the point, and its steps are fast
    args = ("norm=torch", "trainer.val_check_interval=50", f"trainer.max_steps={steps}", *DDP)
    run_dir = tmp_path / "killed"
    cmd = train_command(
        *args, f"hydra.run.dir={run_dir}", f"paths.checkpoint_dir={tmp_path / 'ckpt'}"
    )
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,  # its own process group, signalled as a whole below
    )
    probe = run_dir / "initial_probe.safetensors"  # written when training starts
    deadline = time.monotonic() + 120
    while not probe.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # some steps in, well before the end
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    last = run_dir / "lightning_checkpoints" / "last.ckpt"
    assert f"ckpt_path={last}" in out
    k = int(out.split("SIGTERM at step ")[1].split(":")[0])
    assert 0 < k < steps
    assert not (run_dir / "metrics.json").exists()

    resumed = run(tmp_path / "resumed", *args, f"ckpt_path={last}")
    assert resumed["world_size"] == 2 and resumed["train_steps"] == steps
    assert resumed["session_steps"] == steps - k
