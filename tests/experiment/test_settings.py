"""Bad settings are refused in one place (experiment/settings.py), before anything is built or
written: one line naming the key, the rule and the value, exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from experiment_helpers import ENV, compose_cfg, run

from rmsnorm_kernel.experiment.core.callbacks import ExportFailed
from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.experiment.core.settings import SettingsError
from rmsnorm_kernel.train import main

REFUSED = [
    ("seed=1.5", "seed must be an integer in [0, 4294967295] (got 1.5)"),
    ("seed=abc", "seed must be an integer in [0, 4294967295] (got 'abc')"),
    ("seed=-3", "seed must be an integer in [0, 4294967295] (got -3)"),
    ("trainer.max_steps=0", "trainer.max_steps must be an integer >= 1 (got 0)"),
    ("dataset.n_test=0", "dataset.n_test must be an integer >= 1 (got 0)"),
    ("dataset.batch_size=0", "dataset.batch_size must be an integer >= 1 (got 0)"),
    ("model.optimizer.lr=-1", "model.optimizer.lr must be a finite number > 0 (got -1)"),
    ("paths.checkpoint_dir=", "paths.checkpoint_dir must be a non-empty directory path (got '')"),
    (
        "ckpt_path=nowhere.ckpt",
        "ckpt_path must be null, auto, or an existing last.ckpt / "
        ".safetensors file (got 'nowhere.ckpt')",
    ),
    ("foo=1", "override 'foo=1': no key 'foo' in the config (a new key needs +foo=1)"),
    (  # the command set's groups show in train --help (conf/ is shared) but are not training's
        "benchmark=quick",
        "override 'benchmark=quick': benchmark is a command-set config (python -m "
        "rmsnorm_kernel.cli bench); training takes none",
    ),
    (  # +group= would compose, and only change the config's hash (the checkpoint's name)
        "+exercise=default",
        "exercise is a command-set config (python -m rmsnorm_kernel.cli exercise); training "
        "takes none: drop +exercise=...",
    ),
    (  # 0 failed inside Lightning's fit loop (ZeroDivisionError), after the run dir was made
        "trainer.val_check_interval=0",
        "trainer.val_check_interval must be null, an integer >= 1 (steps) or a float in (0, 1] "
        "(a fraction of an epoch) (got 0)",
    ),
    (
        "trainer.val_check_interval=1.5",
        "trainer.val_check_interval must be null, an integer >= 1 (steps) or a float in (0, 1] "
        "(a fraction of an epoch) (got 1.5)",
    ),
    (
        "trainer.deterministic=maybe",
        "trainer.deterministic must be true, false, warn or null (got 'maybe')",
    ),
    ("dataset.noise=nan", "dataset.noise must be a finite number >= 0 (got nan)"),
    ("dataset.noise=-1", "dataset.noise must be a finite number >= 0 (got -1)"),
    ("dataset.teacher_hidden=0", "dataset.teacher_hidden must be an integer >= 1 (got 0)"),
    ("dataset.seed=-1", "dataset.seed must be an integer in [0, 4294967295] (got -1)"),
    (
        "dataset.shuffle_seed=abc",
        "dataset.shuffle_seed must be an integer in [0, 4294967295] (got 'abc')",
    ),
    (  # checked in the data module only, after Hydra had written the run dir
        "experiment=llama dataset.vocab_size=2",
        "dataset.successors must be an integer in [1, 2] (got 4)",
    ),
    (
        "garbage",
        "override 'garbage' must be key=value, +key=value or ~key (Hydra: missing "
        "EQUAL at '<EOF>')",
    ),
    (  # Hydra's lexer error was shown as its caret line alone: "(Hydra: ^)"
        "hydra.run.dir=~/x",
        "override 'hydra.run.dir=~/x' must be key=value, +key=value or ~key (Hydra: '~' cannot "
        "stand there unquoted; quote the value: key='value')",
    ),
    (  # and another one as the link line: "(Hydra: See https://hydra.cc/...)"
        "a=b=c",
        "override 'a=b=c' must be key=value, +key=value or ~key (Hydra: mismatched input '=' "
        "expecting <EOF>)",
    ),
]


def test_an_unknown_key_is_blamed_on_its_own_override_not_on_a_prefix_of_it(
    tmp_path, monkeypatch, capsys
):
    """``norm=triton norm.eps=-1``: the message blamed ``norm=triton`` (its key ``norm`` is in
    Hydra's text as part of ``norm.eps``)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        main(["norm=triton", "norm.eps=-1"])
    assert refused.value.code == 2
    assert capsys.readouterr().err == (
        "error: override 'norm.eps=-1': no key 'norm.eps' in the config (a new key needs "
        "+norm.eps=-1)\n"
    )


@pytest.mark.parametrize(
    "overrides,blamed",
    [(["norm=reference", "norm=trition"], "norm=trition"), (["debug=nope", "norm=triton"], None)],
)
def test_of_two_overrides_of_one_key_the_bad_one_is_blamed(
    overrides, blamed, tmp_path, monkeypatch, capsys
):
    """``norm=reference norm=trition``: the message blamed ``norm=reference`` (the first
    override of the key Hydra's text names), not the one whose value it could not find."""
    monkeypatch.chdir(tmp_path)
    bad = blamed or overrides[0]
    with pytest.raises(SystemExit) as refused:
        main(overrides if blamed else [overrides[1], "debug=cpu_small", bad])
    assert refused.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: override '{bad}'")
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("override,message", REFUSED, ids=[o for o, _ in REFUSED])
def test_the_command_refuses_a_bad_setting_in_one_line_with_exit_2(
    override, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        main(override.split())  # (one override, or several separated by spaces)
    assert refused.value.code == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_every_value_of_a_sweep_is_checked_before_any_job_runs(tmp_path):
    cmd = [sys.executable, "-m", "rmsnorm_kernel.train", "--multirun", "seed=1,1.5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "error: seed must be an integer in [0, 4294967295] (got 1.5)\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_an_unusable_checkpoint_dir_is_refused_before_fit(where, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file\n")
    target = blocker if where == "file" else blocker / "sub"
    rule = "is a file" if where == "file" else f"lies under a file ({blocker})"
    cfg = compose_cfg([f"paths.checkpoint_dir={target}"], tmp_path)
    with pytest.raises(SettingsError) as refused:
        train(cfg)
    assert str(refused.value) == (
        f"paths.checkpoint_dir must be a writable directory; {target} {rule}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]  # no run dir either


def test_a_damaged_checkpoint_index_is_refused_before_training(tmp_path):
    """An empty or damaged checkpoints/index.json used to fail the export after training, losing
    the run (no metrics.json, no last.ckpt) and leaving a .tmp file behind."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "index.json").write_text("")
    cfg = compose_cfg([f"paths.checkpoint_dir={ckpt}"], tmp_path)
    with pytest.raises(SettingsError, match=r"^paths\.checkpoint_dir: .*index\.json: not a "):
        train(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no run dir


def test_an_index_damaged_during_training_fails_the_export_keeping_the_run(tmp_path):
    """Damaged after the pre-fit check: the export fails as a failed export (metrics.json with
    export_error, last.ckpt kept) and leaves no .tmp or unlisted file in the checkpoint dir."""
    ckpt = tmp_path / "ckpt"
    damage = ["+callbacks.damage._target_=experiment_helpers.DamagedIndex"]
    damage += [f"+callbacks.damage.path={ckpt / 'index.json'}"]
    with pytest.raises(ExportFailed, match="index.json: not a checkpoint index"):
        run(tmp_path, "norm=torch", "trainer.max_steps=3", f"paths.checkpoint_dir={ckpt}", *damage)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "not a checkpoint index" in metrics["export_error"]
    assert (tmp_path / "run" / "lightning_checkpoints" / "last.ckpt").is_file()
    left = sorted(p.name for p in ckpt.iterdir())
    assert left == ["index.json", "index.json.lock"]  # (the lock file stays, as always)


def test_a_diverged_run_exports_nothing(tmp_path):
    """A run whose weights went NaN used to be exported and indexed before its test check
    failed, and check-checkpoints then passed the file (NaN reloads as NaN, bit for bit)."""
    from rmsnorm_kernel.experiment.core.callbacks import CheckFailed

    ckpt = tmp_path / "ckpt"
    with pytest.raises(CheckFailed, match="not finite"):
        run(tmp_path, "norm=torch", "trainer.max_steps=2", "model.optimizer.lr=1e30",
            f"paths.checkpoint_dir={ckpt}")  # fmt: skip
    assert not ckpt.exists() or not any(ckpt.glob("*.safetensors"))
    assert (tmp_path / "run" / "lightning_checkpoints" / "last.ckpt").is_file()


def test_a_failed_export_keeps_metrics_json_and_last_ckpt(tmp_path):
    ckpt = tmp_path / "ckpt"
    in_the_way = ["+callbacks.in_the_way._target_=experiment_helpers.FileInTheWay"]
    in_the_way += [f"+callbacks.in_the_way.path={ckpt}"]
    with pytest.raises(ExportFailed) as failed:
        run(tmp_path, "norm=torch", "trainer.max_steps=3", *in_the_way)
    assert str(failed.value).startswith(f"paths.checkpoint_dir {ckpt}: the export could not be ")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["export_error"] == str(failed.value)
    assert metrics["train_steps"] == 3 and metrics["test/mse"] > 0
    last = tmp_path / "run" / "lightning_checkpoints" / "last.ckpt"
    assert last.is_file()
    # Nothing is lost: last.ckpt holds the trained state. Resuming it at its own step would
    # train nothing (refused); train=false tests it as it is, and tests the same.
    ckpt.unlink()
    with pytest.raises(SettingsError, match=r"^trainer\.max_steps must be greater than the step"):
        run(tmp_path / "again", "norm=torch", "trainer.max_steps=3", f"ckpt_path={last}")
    again = run(tmp_path / "again", "norm=torch", "train=false", f"ckpt_path={last}")
    assert again["test/mse"] == metrics["test/mse"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["campaign.seed=abc"], "campaign.seed must be an integer in [0, 4294967295] (got 'abc')"),
        (["campaign.seed=1.5"], "campaign.seed must be an integer in [0, 4294967295] (got 1.5)"),
        (["foo=1"], "override 'foo=1': no key 'foo' in the config (a new key needs +foo=1)"),
        (
            ["garbage"],
            "override 'garbage' must be key=value, +key=value or ~key (Hydra: missing EQUAL at "
            "'<EOF>')",
        ),
    ],
)
def test_the_command_sets_config_errors_are_one_line(overrides, message):
    """The command set's checks (cli/validate.py): what `rmsnorm-cli` prints with exit 2."""
    from rmsnorm_kernel.cli.main import compose
    from rmsnorm_kernel.cli.validate import ConfigError, check_command_config, compose_error

    with pytest.raises(ConfigError) as refused:
        try:
            check_command_config(compose(overrides))
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - Hydra's composition errors
            raise compose_error(overrides, e) from e
    assert str(refused.value) == message


def test_a_run_from_inside_the_repository_below_its_root_is_refused(monkeypatch, capsys):
    """From ``src/`` (or ``tests/``...), outputs/ and checkpoints/ would land inside the tracked
    tree, where .gitignore and ``clean`` do not look: refused, naming the project root."""
    from rmsnorm_kernel.paths import REPO_ROOT

    below = REPO_ROOT / "src"
    monkeypatch.chdir(below)
    before = sorted(p.name for p in below.iterdir())
    with pytest.raises(SystemExit) as refused:
        main(["debug=cpu_small", "trainer.max_steps=1"])
    assert refused.value.code == 2
    assert f"run from the project root {REPO_ROOT.resolve()}" in capsys.readouterr().err
    assert sorted(p.name for p in below.iterdir()) == before  # nothing written
