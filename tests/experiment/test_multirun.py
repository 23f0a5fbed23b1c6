"""Sweeps as a user runs them: Hydra multirun subprocesses, their tables, files and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from experiment_helpers import ENV, SMALL, train_command

from rmsnorm_kernel.experiment.exports.checkpoint import sha256_of
from rmsnorm_kernel.experiment.exports.reload import main as reload_main


def _multirun(tmp_path: Path, sweep: str, *args: str) -> subprocess.CompletedProcess:
    cmd = train_command(
        *args,
        "trainer.val_check_interval=5",
        f"hydra.sweep.dir={tmp_path / sweep}",
        f"paths.checkpoint_dir={tmp_path / 'ckpt'}",
        multirun=True,
    )
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)


def _index(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "ckpt" / "index.json").read_text())["files"]


def test_make_train_sweep_compares_the_branches_and_exits_zero(tmp_path):
    proc = _multirun(tmp_path, "sweep", "norm=reference,triton", "trainer.max_steps=5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == str(tmp_path / "sweep" / "comparison.json")
    assert "PASSED" in lines
    result = json.loads(Path(lines[-1]).read_text())
    assert result["passed"] and result["swept"] == [] and len(result["groups"]) == 1
    assert result["groups"][0]["branches"]["triton"]["forward_calls"] == 5
    assert (tmp_path / "sweep" / "loss_curves.png").is_file()
    files = sorted(p.name for p in (tmp_path / "ckpt").glob("*.safetensors"))
    assert [f.rsplit("_", 1)[0] for f in files] == ["train_reference_seed0", "train_triton_seed0"]
    assert set(_index(tmp_path)) == set(files)
    # TensorBoard runs are named by branch and seed.
    logs = sorted(p.name for p in (tmp_path / "sweep").glob("*/tensorboard/*"))
    assert logs == ["norm=reference,seed=0", "norm=triton,seed=0"]
    assert not (tmp_path / "outputs").exists()  # the sweep dir override moved everything


def test_seed_sweep_groups_summarises_and_never_overwrites_a_checkpoint(tmp_path):
    args = ("norm=reference,torch", "seed=0,1", "trainer.max_steps=4")
    first = _multirun(tmp_path, "first", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads(Path(first.stdout.strip().splitlines()[-1]).read_text())
    assert result["swept"] == ["seed"]
    assert [g["overrides"] for g in result["groups"]] == [{"seed": "0"}, {"seed": "1"}]
    assert all(set(g["branches"]) == {"reference", "torch"} for g in result["groups"])
    (summary,) = result["summary"]
    assert summary["seeds"] == [0, 1] and summary["branches"]["torch"]["n"] == 2
    assert "paired_delta_max_abs" in summary["branches"]["torch"]
    assert "across seeds [0, 1]" in first.stdout
    labels = sorted(p.name for p in (tmp_path / "first").glob("*/tensorboard/*"))
    assert labels == [f"norm={n},seed={s}" for n in ("reference", "torch") for s in (0, 1)]

    index = _index(tmp_path)
    assert len(index) == 4 and len({e["config_hash"] for e in index.values()}) == 4
    digests = {name: sha256_of(tmp_path / "ckpt" / name) for name in index}

    # The identical sweep again: four new files beside the first four, none replaced.
    second = _multirun(tmp_path, "second", *args)
    assert second.returncode == 0, second.stderr[-3000:]
    index = _index(tmp_path)
    assert len(index) == 8
    assert {name: sha256_of(tmp_path / "ckpt" / name) for name in digests} == digests
    new = sorted(set(index) - set(digests))
    assert all(name.endswith(".v2.safetensors") for name in new)
    assert {index[n]["config_hash"] for n in new} == {index[n]["config_hash"] for n in digests}
    assert {Path(index[n]["run_dir"]).parent.name for n in new} == {"second"}
    assert reload_main(["--root", str(tmp_path / "ckpt")]) == 0


def test_sweep_exits_non_zero_when_a_tolerance_is_exceeded(tmp_path):
    proc = _multirun(
        tmp_path,
        "sweep",
        "norm=reference,triton",
        "trainer.max_steps=2",
        "compare.initial_error_tolerance=0",
    )
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "initial output error" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].endswith("comparison.json")


#: Imports the entry point (the slow part), waits for the test's "go" file, then runs it: the
#: three sweeps below compose their configs within the same second.
_AT_THE_SAME_TIME = """
import sys, time
from pathlib import Path
import rmsnorm_kernel.train as entry
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.005)
sys.argv = ["rmsnorm_kernel.train", *sys.argv[3:]]
entry.main()
"""


def test_concurrent_sweeps_started_in_the_same_second_each_keep_their_own_dir(tmp_path):
    import time

    seeds = (21, 22, 23)
    go = tmp_path / "go"
    procs = []
    for seed in seeds:
        cmd = [sys.executable, "-c", _AT_THE_SAME_TIME, str(tmp_path / f"ready{seed}"), str(go)]
        cmd += ["--multirun", "norm=reference,torch", f"seed={seed}", "trainer.max_steps=2"]
        cmd += [SMALL, f"paths.checkpoint_dir={tmp_path / 'ckpt'}"]
        procs.append(
            subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, text=True)
        )
    deadline = time.monotonic() + 240
    while not all((tmp_path / f"ready{s}").exists() for s in seeds):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    time.sleep(1.02 - time.time() % 1)  # just after a second starts
    go.touch()
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    dirs = set()
    for seed, out in zip(seeds, outs, strict=True):
        lines = out.strip().splitlines()
        assert "PASSED" in lines
        comparison = tmp_path / lines[-1]  # relative to the sweep's cwd
        dirs.add(comparison.parent)
        result = json.loads(comparison.read_text())
        branches = result["groups"][0]["branches"]
        assert {b["seed"] for b in branches.values()} == {seed}, (seed, comparison)
    assert len(dirs) == 3


def test_a_sweep_dir_holding_files_is_refused_before_any_job(tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "0_reference").mkdir()
    proc = _multirun(tmp_path, "sweep", "norm=reference,torch", "trainer.max_steps=2")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: hydra.sweep.dir must be a new or empty directory; {tmp_path / 'sweep'} already "
        "holds another sweep's files"
    )
    assert list((tmp_path / "sweep").iterdir()) == [tmp_path / "sweep" / "0_reference"]
