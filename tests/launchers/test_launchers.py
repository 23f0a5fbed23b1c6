"""Hydra launchers for sweeps: local processes (joblib) and SLURM (submitit).

The configs compose (compose API, with the hydra node to see the launcher); the SLURM launcher
writes its cluster keys into the sbatch script it submits (a stand-in ``sbatch`` on PATH records
the script, so no cluster is needed); and a small joblib sweep trains in parallel processes and
ends with the comparison, as ``make train`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from rmsnorm_kernel.paths import config_dir

JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
CLUSTER = [
    "hydra.launcher.partition=gpu",
    "hydra.launcher.account=rmsnorm_project",
    "hydra.launcher.gpus_per_node=2",
    "hydra.launcher.timeout_min=30",
]
# A few interpreter steps on a small problem: the point is the launcher, not the training.
TINY = [
    "dataset.in_features=16",
    "dataset.out_features=4",
    "dataset.teacher_hidden=16",
    "dataset.n_train=64",
    "dataset.n_val=32",
    "dataset.n_test=32",
    "dataset.eval_batch_size=32",
    "model.net.hidden_features=32",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
]


def _hydra_launcher(*overrides: str):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    return cfg.hydra.launcher


def test_joblib_launcher_composes():
    launcher = _hydra_launcher("hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert launcher._target_ == JOBLIB
    assert launcher.n_jobs == 2


@pytest.mark.parametrize("choice", ["slurm", "submitit_slurm"])
def test_slurm_launcher_takes_the_cluster_keys_from_config(choice):
    launcher = _hydra_launcher(f"hydra/launcher={choice}", *CLUSTER)
    assert launcher._target_ == SLURM
    assert (launcher.partition, launcher.account) == ("gpu", "rmsnorm_project")
    assert (launcher.gpus_per_node, launcher.timeout_min) == (2, 30)


def test_slurm_launcher_defaults_to_one_gpu_for_an_hour_on_the_default_partition():
    launcher = _hydra_launcher("hydra/launcher=slurm")
    assert (launcher.partition, launcher.account) == (None, None)
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.timeout_min) == (1, 1, 60)


def _train(tmp_path: Path, *overrides: str, env=None, timeout=300) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "rmsnorm_kernel.train",
        "--multirun",
        *TINY,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"paths.checkpoint_dir={tmp_path / 'ckpt'}",
        *overrides,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env
    )


def test_slurm_launcher_writes_the_keys_into_the_sbatch_script(tmp_path):
    bin_dir, capture = tmp_path / "bin", tmp_path / "submitted.sh"
    bin_dir.mkdir()
    # Stand-ins for SLURM: submitit looks for srun on PATH; sbatch keeps the script it is given
    # and refuses it, so nothing runs.
    stand_ins = {
        "srun": "#!/bin/sh\nexit 1\n",
        "sbatch": f'#!/bin/sh\ncp "$1" {capture}\necho "sbatch: error: no cluster" >&2\nexit 1\n',
    }
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    proc = _train(tmp_path, "hydra/launcher=slurm", *CLUSTER, "norm=reference,torch", env=env)
    assert proc.returncode != 0  # the stand-in refused the job
    assert capture.is_file(), proc.stderr[-3000:]
    script = capture.read_text()
    for flag in ("--partition=gpu", "--account=rmsnorm_project", "--gpus-per-node=2", "--time=30"):
        assert f"#SBATCH {flag}\n" in script, script
    assert "#SBATCH --array=0-1%" in script  # one array task per run of the sweep
    assert not (tmp_path / "ckpt").exists()  # nothing trained here


def test_joblib_sweep_trains_in_parallel_and_compares(tmp_path):
    proc = _train(
        tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "norm=reference,torch"
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last == str(tmp_path / "sweep" / "comparison.json")
    result = json.loads(Path(last).read_text())
    assert result["passed"] is True
    assert len(list((tmp_path / "ckpt").glob("*.safetensors"))) == 2
    # Each run ran in a worker process of its own, not in the launching process.
    assert "Joblib.Parallel(n_jobs=2" in proc.stderr + proc.stdout
