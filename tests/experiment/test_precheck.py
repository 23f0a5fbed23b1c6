"""The command's pre-check refuses what used to fail late, after Hydra had made the run dir: the
net's values (by its builder's own rules), Lightning's trainer settings (asked of Lightning), a
norm whose package is missing, a finished run's dir, and a ``ckpt_path`` that cannot be resumed
or warm-started from. One line, exit 2, nothing written.

Nothing here trains: checkpoints are crafted (a ``last.ckpt`` holding a run identity and a step,
tiny safetensors exports), so every test takes well under a second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from experiment_helpers import SMALL, compose_cfg
from lightning.fabric import accelerators as fabric
from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator
from omegaconf import open_dict
from safetensors import safe_open
from safetensors.torch import save_file

from rmsnorm_kernel.experiment.core import builders
from rmsnorm_kernel.experiment.core.identity import CHECKPOINT_KEY, config_hash, run_identity
from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.experiment.core.settings import (
    SettingsError,
    check_run_dir,
    check_train_config,
)
from rmsnorm_kernel.experiment.exports.checkpoint import make_metadata, write_checkpoint
from rmsnorm_kernel.train import apart_note, main, precheck

LLAMA = "experiment=llama"

REFUSED = [
    (
        [SMALL, "model.net.hidden_features=0"],
        "model.net.hidden_features: must be an integer >= 1 (got 0)",
    ),
    ([SMALL, "model.net.eps=0"], "model.net.eps: must be a finite number > 0 (got 0)"),
    ([SMALL, "model.net.eps=-1e-6"], "model.net.eps: must be a finite number > 0 (got -1e-06)"),
    (
        [LLAMA, "dataset.seq_len=0"],
        "model.net.max_position_embeddings: must be an integer >= 1 (got 0); set by "
        "${dataset.seq_len}",
    ),
    (
        [LLAMA, "dataset.vocab_size=0"],
        "model.net.vocab_size: must be an integer >= 1 (got 0); set by ${dataset.vocab_size}",
    ),
    (
        [LLAMA, "model.net.num_attention_heads=3"],
        "model.net: hidden_size must be a multiple of num_attention_heads, and that of "
        "num_key_value_heads (got 64, 3, 2)",
    ),
    (
        [SMALL, "norm=liger"],
        "model.net.norm: norm=liger needs the liger-kernel package (pip install liger-kernel); "
        "it is not importable here (",
    ),
    (
        [SMALL, "trainer.precision=bf17"],
        "trainer.precision must be a precision Lightning's Trainer accepts (got 'bf17'; "
        "Lightning: Precision 'bf17' is invalid. Allowed precision values: (",
    ),
    (
        [SMALL, "trainer.accelerator=gpu"],
        "trainer.accelerator, devices, strategy, num_nodes and precision must be a combination "
        "Lightning's Trainer accepts on this machine (got trainer.accelerator='gpu', "
        "trainer.devices=1, trainer.precision='32-true'; Lightning: No supported gpu backend "
        "found!)",
    ),
    (
        [SMALL, "trainer.devices=0"],
        "trainer.accelerator, devices, strategy, num_nodes and precision must be a combination "
        "Lightning's Trainer accepts on this machine (got trainer.accelerator='auto', "
        "trainer.devices=0, trainer.precision='32-true'; Lightning: `Trainer(devices=0)` value "
        "is not a valid input using ",
    ),
    (
        [SMALL, "trainer.accelerator=cpu", "trainer.precision=16-mixed"],
        "trainer.precision must be one Lightning runs as asked on CPUAccelerator: it would run "
        "'16-mixed' as 'bf16-mixed' (You passed `Trainer(accelerator='cpu', "
        "precision='16-mixed')` but AMP with fp16 is not supported on CPU. Using "
        "`precision='bf16-mixed'` instead.); ask for trainer.precision=bf16-mixed (or another) "
        "explicitly (got '16-mixed')",
    ),
]


@pytest.fixture
def no_gpu_no_liger(monkeypatch):
    """This machine as a new user's CPU box: no GPU backend, liger-kernel not installed. Both
    Lightning's accelerator classes: ``accelerator=auto`` is chosen with fabric's, the Trainer's
    connector then checks lightning.pytorch's (on a GPU machine, patching one is not enough)."""
    for cls in (CUDAAccelerator, MPSAccelerator, fabric.CUDAAccelerator, fabric.MPSAccelerator):
        monkeypatch.setattr(cls, "is_available", staticmethod(lambda: False))
    monkeypatch.setitem(sys.modules, "liger_kernel", None)


def _refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err[len("error: ") : -1]


@pytest.mark.parametrize("overrides,message", REFUSED, ids=[" ".join(o[1:]) for o, _ in REFUSED])
def test_a_bad_net_trainer_or_norm_value_is_refused_before_anything_is_written(
    overrides, message, tmp_path, monkeypatch, capsys, no_gpu_no_liger
):
    monkeypatch.chdir(tmp_path)
    said = _refused([*overrides, f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert said.startswith(message) if message.endswith(("(", " ")) else said == message, said
    assert list(tmp_path.iterdir()) == []  # no run dir, no .hydra/, no train.log


def test_a_sweep_with_one_bad_value_is_refused_before_any_job(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["--multirun", SMALL, "model.net.hidden_features=8,16,0"]
    said = _refused([*argv, f"hydra.sweep.dir={tmp_path / 'sweep'}"], capsys)
    assert said == "model.net.hidden_features: must be an integer >= 1 (got 0)"
    assert list(tmp_path.iterdir()) == []


def test_the_check_and_the_build_refuse_with_one_rule():
    """``check_values`` runs the very function each builder runs first: same refusals, same
    words, for the MLP and the Llama."""
    mlp = {"builder": "mlp", "in_features": 4, "hidden_features": 8, "out_features": 2}
    mlp |= {"norm": "torch", "eps": 1e-6}
    llama = dict(compose_cfg([LLAMA], small=False).model.net)
    llama = {k: v for k, v in llama.items() if not k.startswith("_")}
    llama |= {"vocab_size": 32, "max_position_embeddings": 8}
    bad = [
        {**mlp, "hidden_features": 0},
        {**mlp, "in_features": -1},
        {**mlp, "eps": 0},
        {**mlp, "eps": -1.0},
        {**llama, "hidden_size": 30},
        {**llama, "num_key_value_heads": 3},
        {**llama, "max_position_embeddings": 0},
        {**llama, "eps": 0.0},
        {**llama, "attn_implementation": "flash"},
    ]
    for spec in bad:
        with pytest.raises(builders.SpecError) as checked:
            builders.check_values(spec)
        with pytest.raises(builders.SpecError) as built:
            builders.build_from_spec(spec)
        assert str(checked.value) == str(built.value), spec
    builders.check_values(mlp)  # good values pass, nothing built
    builders.check_values(llama)


def test_a_missing_optional_package_is_named_by_the_check_and_the_build(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    llama = dict(compose_cfg([LLAMA], small=False).model.net)
    llama = {k: v for k, v in llama.items() if not k.startswith("_")} | {"vocab_size": 32}
    with pytest.raises(builders.SpecError, match=r"^model\.net\.builder: builder=llama needs the "):
        builders.check_values({**llama, "max_position_embeddings": 8}, field="model.net")
    mlp = {"builder": "mlp", "in_features": 4, "hidden_features": 8, "out_features": 2}
    with pytest.raises(builders.SpecError, match=r"^net\.norm: norm=hf needs the transformers "):
        builders.build_from_spec({**mlp, "norm": "hf"})


# --- a finished run's dir --------------------------------------------------------------------


def _finished(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"test/mse": 0.5}) + "\n")
    return run_dir


def test_training_into_a_finished_runs_dir_is_refused(tmp_path, monkeypatch, capsys):
    run_dir = _finished(tmp_path / "done")
    monkeypatch.chdir(tmp_path)
    said = _refused([SMALL, f"hydra.run.dir={run_dir}"], capsys)
    assert said == (
        f"hydra.run.dir must be a new directory or a stopped run's; {run_dir} already holds a "
        "finished run (metrics.json): choose another dir"
    )
    said = _refused([SMALL, f"paths.output_dir={run_dir}"], capsys)
    assert said.startswith(
        f"paths.output_dir must be a new directory or a stopped run's; {run_dir}"
    )
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.json"]  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done"]
    # train(cfg) itself (tests, other callers) refuses the same dir.
    cfg = compose_cfg([f"paths.output_dir={run_dir}", f"paths.checkpoint_dir={tmp_path / 'c'}"])
    with pytest.raises(SettingsError, match=r"^paths\.output_dir must be a new directory"):
        train(cfg)
    # A stopped run's dir (no metrics.json) may be resumed into; a new dir passes.
    precheck([SMALL, f"hydra.run.dir={tmp_path / 'stopped'}"])
    (tmp_path / "stopped").mkdir()
    (tmp_path / "stopped" / "train.log").write_text("")
    precheck([SMALL, f"hydra.run.dir={tmp_path / 'stopped'}"])


def test_an_output_dir_away_from_hydras_run_dir_is_named_in_a_warning(tmp_path, monkeypatch):
    """``paths.output_dir=X`` under the command: the run writes to X while Hydra keeps .hydra/
    and the job log in its own run dir; the warning names both and the fix (hydra.run.dir=X).
    The same dir, however written, is no warning."""
    monkeypatch.chdir(tmp_path)
    note = apart_note(str(tmp_path / "mine"), "outputs/train/runs/x")
    assert note is not None and note.startswith(f"paths.output_dir={tmp_path / 'mine'}: ")
    assert "outputs/train/runs/x" in note and f"hydra.run.dir={tmp_path / 'mine'}" in note
    assert apart_note("outputs/train/runs/x", str(tmp_path / "outputs/train/runs/x")) is None
    assert apart_note("a/../b", "b") is None


# --- ckpt_path: a last.ckpt --------------------------------------------------------------------


def _last_ckpt(path: Path, overrides: list[str], step: int) -> Path:
    """A ``last.ckpt`` as this project's runs save it, as far as the checks read it: the run
    identity of ``overrides``' config and the step it stopped at."""
    cfg = compose_cfg(overrides, small=False)
    with open_dict(cfg):
        cfg.config_hash = config_hash(cfg)
        cfg.paths.output_dir = str(path.parent.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({CHECKPOINT_KEY: run_identity(cfg), "global_step": step, "epoch": 0}, path)
    return path


def test_a_resume_with_no_steps_left_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, capsys
):
    last = _last_ckpt(tmp_path / "a" / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    monkeypatch.chdir(tmp_path)
    for budget in (3, 2):
        said = _refused([SMALL, f"trainer.max_steps={budget}", f"ckpt_path={last}"], capsys)
        assert said == (
            f"trainer.max_steps must be greater than the step ckpt_path resumes from ({last} is "
            f"at step 3), or nothing is trained (got {budget}): raise it, or add train=false to "
            "test that checkpoint as it is"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    precheck([SMALL, "trainer.max_steps=4", f"ckpt_path={last}"])  # a step left: resumes
    precheck([SMALL, "trainer.max_steps=3", "train=false", f"ckpt_path={last}"])  # tests it


def test_another_branchs_last_ckpt_is_refused_before_hydra_makes_the_run_dir(
    tmp_path, monkeypatch, capsys
):
    last = _last_ckpt(tmp_path / "a" / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    said = _refused([SMALL, "norm=triton", f"ckpt_path={last}", f"hydra.run.dir={run_dir}"], capsys)
    assert said.startswith("ckpt_path must be a checkpoint of this branch (norm=triton); ")
    said = _refused(
        [SMALL, "model.optimizer.lr=0.002", f"ckpt_path={last}", f"hydra.run.dir={run_dir}"],
        capsys,
    )
    assert said == (
        f"ckpt_path must be a checkpoint of this config; {last} was saved with "
        "model.optimizer.lr=0.001 (this run 0.002)"
    )
    # a sweep: the branch whose checkpoint it is not is refused before any job
    sweep = ["--multirun", SMALL, "norm=reference,triton", f"ckpt_path={last}"]
    said = _refused([*sweep, f"hydra.sweep.dir={tmp_path / 'sweep'}"], capsys)
    assert said.startswith("ckpt_path must be a checkpoint of this branch (norm=triton); ")
    assert not run_dir.exists() and not (tmp_path / "sweep").exists()


def test_an_unreadable_last_ckpt_is_refused_with_the_reason_in_the_users_terms(
    tmp_path, monkeypatch, capsys
):
    """torch.load's own errors for these say e.g. ``KeyError: 101`` or ``EOFError:``; the
    refusal says what the file is instead (and still exits 2 with nothing written)."""
    good = _last_ckpt(tmp_path / "a" / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    empty, text, damaged, code = (tmp_path / f"{n}.ckpt" for n in ("empty", "text", "cut", "obj"))
    empty.write_bytes(b"")
    text.write_text("hello\n")
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    torch.save({"module": torch.nn.Linear(2, 2)}, code)  # a pickled class: weights-only refuses
    head = "ckpt_path must be a Lightning checkpoint of this project; "
    cases = {
        empty: f"{head}{empty} is empty (0 bytes): a run that was killed while saving? start "
        "without ckpt_path",
        text: f"{head}{text} is not a file torch.save wrote (it starts with b'hell'), so not a "
        "last.ckpt",
        damaged: f"{head}{damaged} is a damaged or truncated torch.save file (RuntimeError: ",
        code: f"{head}{code} holds pickled Python objects beyond tensors and plain containers, "
        "which a weights-only load refuses (nothing in it was run): a last.ckpt of this project "
        "holds none",
    }
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    for path, message in cases.items():
        said = _refused([SMALL, f"ckpt_path={path}", f"hydra.run.dir={tmp_path / 'run'}"], capsys)
        assert said.startswith(message) if message.endswith("(RuntimeError: ") else said == message
    assert sorted(tmp_path.iterdir()) == before


def test_a_finished_run_may_be_trained_on_in_its_own_dir_explicitly(tmp_path):
    run_dir = _finished(tmp_path / "done")
    last = _last_ckpt(run_dir / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    precheck([SMALL, f"hydra.run.dir={run_dir}", "trainer.max_steps=5", f"ckpt_path={last}"])
    cfg = compose_cfg([f"ckpt_path={last}"])
    check_run_dir(cfg, run_dir, "hydra.run.dir")  # its own last.ckpt: allowed
    other = _last_ckpt(tmp_path / "b" / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    with pytest.raises(SettingsError) as refused:
        check_run_dir(compose_cfg([f"ckpt_path={other}"]), run_dir, "hydra.run.dir")
    assert str(refused.value).endswith(
        f"choose another dir, or train that run on with ckpt_path={last}"
    )


# --- ckpt_path: a .safetensors warm start --------------------------------------------------------


def _export(path: Path, hidden: int = 64) -> Path:
    """A tiny MLP exported as training does (debug=cpu_small's sizes, ``hidden`` wide)."""
    spec = {"builder": "mlp", "in_features": 16, "hidden_features": hidden, "out_features": 4}
    spec |= {"norm": "reference", "eps": 1e-6}
    torch.manual_seed(0)
    net = builders.build_from_spec(spec)
    write_checkpoint(
        path, net, torch.randn(3, 16), make_metadata(spec, "reference", 0, "0" * 12, "cpu")
    )
    return path


def _renamed(src: Path, dst: Path, old: str, new: str) -> Path:
    with safe_open(str(src), framework="pt") as f:
        tensors = {(new if k == old else k): f.get_tensor(k) for k in f.keys()}
        meta = dict(f.metadata())
    save_file(tensors, str(dst), metadata=meta)
    return dst


def test_a_bad_warm_start_file_is_refused_in_one_line_before_anything_is_written(
    tmp_path, monkeypatch, capsys
):
    good = _export(tmp_path / "good.safetensors")
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(good.read_bytes()[:100])
    narrow = _export(tmp_path / "narrow.safetensors", hidden=32)
    renamed = _renamed(good, tmp_path / "renamed.safetensors", "norm.weight", "norm.scale")
    plain = tmp_path / "plain.safetensors"
    save_file({"fc1.weight": torch.zeros(64, 16)}, str(plain))
    cases = {
        corrupt: f"ckpt_path: {corrupt}: unreadable safetensors file, truncated or corrupt (",
        narrow: (
            f"ckpt_path: {narrow}: its weights are not those of this config's net (model.net): "
            "tensor 'fc1.weight' is F32 [32, 16] in the file, the net needs F32 [64, 16]"
        ),
        renamed: (
            f"ckpt_path: {renamed}: its weights are not those of this config's net (model.net): "
            "missing ['norm.weight'], unexpected ['norm.scale']"
        ),
        plain: f"ckpt_path: {plain}: not an experiment checkpoint (missing metadata field(s) [",
    }
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    for path, message in cases.items():
        said = _refused([SMALL, f"ckpt_path={path}", f"hydra.run.dir={tmp_path / 'run'}"], capsys)
        assert (
            said.startswith(message)
            if message.endswith("(") or message.endswith("[")
            else (said == message)
        ), said
        # train(cfg) refuses it the same way, before building or writing anything
        cfg = compose_cfg([f"ckpt_path={path}"], tmp_path / "direct")
        with pytest.raises(SettingsError) as refused:
            train(cfg)
        assert str(refused.value) == said
    assert sorted(tmp_path.iterdir()) == before
    check_train_config(compose_cfg([f"ckpt_path={good}"], tmp_path / "ok"))  # the right net


def test_the_devices_are_checked_against_this_machine_only_when_the_jobs_run_here(
    tmp_path, monkeypatch, capsys, no_gpu_no_liger
):
    """trainer=ddp asks for every GPU (trainer.devices=-1): refused on this GPU-less machine,
    while the same sweep submitted to SLURM runs on GPU nodes, whose train() checks it there."""
    monkeypatch.chdir(tmp_path)
    sweep = ["--multirun", SMALL, "trainer=ddp", "norm=reference,torch"]
    said = _refused([*sweep, f"hydra.sweep.dir={tmp_path / 'sweep'}"], capsys)
    assert said == (
        "trainer.devices: DDP on CPU needs a number of processes, e.g. trainer.devices=2 (got -1)"
    )
    precheck([*sweep[1:], "hydra/launcher=slurm"], multirun=True)
    precheck([*sweep[1:], "hydra/launcher=joblib", "trainer.devices=2"], multirun=True)
    with pytest.raises(SettingsError, match=r"^trainer\.precision must be a precision Lightning"):
        precheck([*sweep[1:], "hydra/launcher=slurm", "trainer.precision=bf17"], multirun=True)
    assert list(tmp_path.iterdir()) == []


def test_a_ddp_run_is_checked_as_the_processes_train_starts_see_it(monkeypatch):
    """In an interactive session Lightning refuses its own DDP launchers; train() starts fresh
    processes itself, so trainer=ddp on two CPU processes passes, while a DDP Trainer built in
    this very process (one device) is refused as Lightning would refuse it."""
    from lightning.pytorch.trainer.connectors import accelerator_connector

    monkeypatch.setattr(accelerator_connector, "_IS_INTERACTIVE", True)
    for name in ("LOCAL_RANK", "SLURM_NTASKS", "SLURM_JOB_NAME", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    ddp = ["trainer=ddp", "trainer.accelerator=cpu"]
    check_train_config(compose_cfg([*ddp, "trainer.devices=2"]), paths=False)
    with pytest.raises(SettingsError, match=r"is not compatible with an interactive environment"):
        check_train_config(compose_cfg([*ddp, "trainer.devices=1"]), paths=False)
    assert accelerator_connector._IS_INTERACTIVE is True  # left as it was


@pytest.mark.parametrize("gone", [0, 1, 2], ids=["precision-parser", "connector", "interactive"])
def test_a_lightning_without_the_private_names_asked_skips_that_check_visibly(
    gone, monkeypatch, no_gpu_no_liger
):
    """The trainer check asks private Lightning names; a Lightning that moved one must not stop
    every run: the check is skipped with a warning naming it, and the Trainer checks later."""
    import importlib

    from rmsnorm_kernel.experiment.core import settings

    module, name = settings._LIGHTNING_PRIVATE[gone]
    with monkeypatch.context() as moved:
        moved.delattr(importlib.import_module(module), name)
        with pytest.warns(settings.PrecheckSkipped, match=rf"has no {module}\.{name}; trainer\."):
            check_train_config(compose_cfg(["trainer.precision=bf17"]), paths=False)
    # with Lightning as installed, the same setting is refused
    with pytest.raises(SettingsError, match=r"^trainer\.precision must be a precision Lightning"):
        check_train_config(compose_cfg(["trainer.precision=bf17"]), paths=False)


SWEEP_REFUSED = [
    (
        ["--multirun", "norm=triton"],
        "a --multirun ends by comparing branches: sweep norm over at least two, e.g. "
        "norm=reference,triton (got only norm=triton); or run without the comparison: "
        "~hydra.callbacks.compare",
    ),
    (
        ["--multirun", "norm=triton,triton"],
        "norm must list each branch once in a --multirun (got triton,triton: triton twice); "
        "repeat a run with seed=0,1 instead",
    ),
    (
        ["--multirun", "norm=reference,triton", "compare.baseline=refrence"],
        "compare.baseline must be one of the sweep's norms ['reference', 'triton'] (got "
        "'refrence')",
    ),
    (
        ["--multirun", "norm=reference,triton", "train=false"],
        "train must be true in a --multirun: the comparison judges trained and tested branches "
        "(got train=False); or run without the comparison: ~hydra.callbacks.compare",
    ),
    (
        ["--multirun", "norm=reference,triton", "test=false"],
        "test must be true in a --multirun: the comparison judges trained and tested branches "
        "(got test=False); or run without the comparison: ~hydra.callbacks.compare",
    ),
    (["train=no"], "train must be true or false (got 'no')"),
    (
        ["+trainer.max_step=5"],
        "trainer.max_step: lightning.Trainer takes no argument 'max_step'; did you mean "
        "trainer.max_steps?",
    ),
    (
        ["+model.optimizer.weight_decy=0.1"],
        "model.optimizer.weight_decy: torch.optim.Adam takes no argument 'weight_decy'; did you "
        "mean model.optimizer.weight_decay?",
    ),
    (
        ["+dataset.bs=3"],  # a **kwargs init passing them to its base's: the base's are known
        "dataset.bs: rmsnorm_kernel.experiment.mlp.data.SyntheticDataModule takes no argument 'bs'",
    ),
    (
        [LLAMA, "trainer.max_steps=2"],
        "trainer.max_steps must be greater than callbacks.throughput.warmup_steps (5): the "
        "throughput is the median of the steps after the warm-up (got 2); raise it, or set "
        "callbacks.throughput.warmup_steps=0",
    ),
    (
        ["train=false", "test=false"],
        "train and test must not both be false: the run would do nothing",
    ),
]


@pytest.mark.parametrize("argv,message", SWEEP_REFUSED, ids=[" ".join(a) for a, _ in SWEEP_REFUSED])
def test_what_the_comparison_would_refuse_after_every_job_is_refused_first(
    argv, message, tmp_path, monkeypatch, capsys
):
    """These used to train every job, then fail the comparison (or pass it vacuously)."""
    monkeypatch.chdir(tmp_path)
    small = [] if LLAMA in argv else [SMALL]  # (debug=cpu_small sizes the MLP's data)
    said = _refused([*argv, *small, f"hydra.sweep.dir={tmp_path / 'sweep'}"], capsys)
    assert said == message
    assert list(tmp_path.iterdir()) == []
    if argv[0] == "--multirun":  # without the comparison, the same sweep may run
        precheck([*argv[1:], *small, "~hydra.callbacks.compare"], multirun=True)


def test_auto_does_not_resume_a_stopped_run_a_finished_run_resumed_already(tmp_path):
    """A stopped run, resumed to the end in a new dir: `ckpt_path=auto` used to resume the
    stopped one again (it has no metrics.json), training the same steps twice."""
    from rmsnorm_kernel.experiment.core.identity import find_resumable

    stopped = _last_ckpt(tmp_path / "a" / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    cfg = compose_cfg([SMALL], small=False)
    assert find_resumable(cfg, tmp_path) == stopped
    finished = tmp_path / "b"
    finished.mkdir()
    (finished / "metrics.json").write_text(json.dumps({"resumed_from": str(stopped)}))
    assert find_resumable(cfg, tmp_path) is None
    (finished / "metrics.json").write_text(json.dumps({"resumed_from": None}))  # a fresh run
    assert find_resumable(cfg, tmp_path) == stopped


def test_auto_says_which_unreadable_checkpoint_it_skips(tmp_path, caplog):
    """A damaged last.ckpt (whose branch cannot be read) is skipped by `ckpt_path=auto`, as
    before, but no longer silently: a warning names it, once."""
    from rmsnorm_kernel.experiment.core.identity import find_resumable

    stopped = _last_ckpt(tmp_path / "a" / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    damaged = tmp_path / "b" / "lightning_checkpoints" / "last.ckpt"
    damaged.parent.mkdir(parents=True)
    data = stopped.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    cfg = compose_cfg([SMALL], small=False)
    with caplog.at_level("WARNING", logger="rmsnorm_kernel"):
        assert find_resumable(cfg, tmp_path) == stopped
        assert find_resumable(cfg, tmp_path) == stopped
    said = [r.getMessage() for r in caplog.records if "skipping an unreadable" in r.getMessage()]
    assert len(said) == 1 and str(damaged) in said[0], said


def test_a_stopped_runs_dir_is_taken_only_to_resume_it(tmp_path, monkeypatch, capsys):
    """Training into a stopped run's dir without resuming it used to overwrite its last.ckpt
    (its only saved progress; another branch's run made its printed resume command fail)."""
    run_dir = tmp_path / "stopped"
    last = _last_ckpt(run_dir / "lightning_checkpoints" / "last.ckpt", [SMALL], 3)
    monkeypatch.chdir(tmp_path)
    for extra in (["norm=torch"], [], ["ckpt_path=auto"]):
        said = _refused([SMALL, *extra, f"hydra.run.dir={run_dir}"], capsys)
        assert said == (
            f"hydra.run.dir: {run_dir} holds a stopped run's last.ckpt, which this run would "
            f"overwrite: resume it with ckpt_path={last}, or choose another dir"
        )
    assert sorted(p.name for p in run_dir.iterdir()) == ["lightning_checkpoints"]
    precheck([SMALL, "trainer.max_steps=4", f"ckpt_path={last}", f"hydra.run.dir={run_dir}"])
