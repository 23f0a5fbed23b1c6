"""reference, plot, check-environment, check-checkpoints."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from cli_helpers import read_json, run_cli

from rmsnorm_kernel.cli.main import main


def test_reference_checks_only_the_oracle(tmp_path):
    assert run_cli("reference", f"campaign.out_dir={tmp_path}") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oracle.json"]
    oracle = read_json(tmp_path / "oracle.json")
    assert all(c["passed"] for c in oracle["checks"])
    assert any(c["check"].startswith("gradcheck") for c in oracle["checks"])


def test_data_writes_the_splits(tmp_path):
    assert run_cli("data", f"paths.data_dir={tmp_path}") == 0
    manifest = read_json(tmp_path / "manifest.json")
    assert set(manifest["splits"]) == {"train", "val", "test"}
    assert manifest["deterministic"] and isinstance(manifest["seed"], int)
    for split in manifest["splits"].values():
        data = (tmp_path / split["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == split["sha256"]
        assert split["rows"] == split["inputs"]["shape"][0] > 0
        # metadata keys sorted in the header: safetensors' own order varies per process, which
        # made the sha256 of the same split differ between two runs of the command
        size = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8 : 8 + size])["__metadata__"]
        assert list(meta) == sorted(meta)


def test_plot_writes_pngs(smoke_checks, tmp_path):
    figs = tmp_path / "figures"
    code = run_cli(
        "plot",
        f"campaign.out_dir={smoke_checks}",
        f"benchmark.out_dir={tmp_path / 'none'}",
        f"paths.figures_dir={figs}",
    )
    assert code == 0
    for name in ("check-errors.png", "check-tolerance.png"):
        assert (figs / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_any_json_fails(tmp_path):
    assert (
        run_cli(
            "plot",
            f"campaign.out_dir={tmp_path}",
            f"benchmark.out_dir={tmp_path}",
            f"paths.figures_dir={tmp_path / 'f'}",
        )
        == 1
    )


def test_check_environment(capsys):
    assert main(["check-environment"]) == 0
    out = capsys.readouterr().out
    if torch.cuda.is_available():
        assert "on the GPU" in out
    else:
        assert "interpreter" in out and "in the interpreter" in out


@pytest.mark.parametrize("content", [None, b"not a safetensors file"])
def test_check_checkpoints_is_the_reload_check(tmp_path, capsys, content):
    """Same exit code and same words as `make reload-check` (one implementation, two names)."""
    from rmsnorm_kernel.experiment.exports.reload import main as reload_main

    if content is not None:
        (tmp_path / "bad.safetensors").write_bytes(content)
    code = run_cli("check-checkpoints", "--root", str(tmp_path))
    cli_out = capsys.readouterr()
    assert code == 1 and "FAILED" in cli_out.err
    assert reload_main(["--root", str(tmp_path)]) == code
    assert capsys.readouterr() == cli_out


@pytest.mark.parametrize(
    "override, message",
    [
        ("campaign.seed=abc", "campaign.seed must be an integer"),
        ("campaign.seed=-3", "campaign.seed must be an integer"),
        ("garbage", "override 'garbage' must be key=value"),
        ("foo=1", "override 'foo=1': no key 'foo' in the config"),
    ],
)
def test_bad_overrides_exit_2_with_one_line(override, message, capsys):
    """A bad value, a malformed override or an unknown key: one line naming it, rc 2, before
    any command runs (a traceback before)."""
    assert main(["check-forward", override]) == 2
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert message in text and "Traceback" not in text
    assert len(text.splitlines()) == 1, text


def test_an_unknown_key_is_blamed_on_its_own_override(capsys):
    """Two overrides, the second's key unknown: the first's key (``campaign``) is a prefix of
    the second's, and was blamed."""
    assert main(["check-forward", "campaign=default", "campaign.sed=1"]) == 2
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert text.startswith("error: override 'campaign.sed=1': no key 'campaign.sed'"), text


def test_override_culprit_reads_the_key_hydra_names():
    from rmsnorm_kernel.experiment.core.settings import override_culprit

    overrides = ["norm=triton", "+norm.eps=1", "seed=3"]
    text = "Could not override 'norm.eps'. To append to your config use +norm.eps=1"
    assert override_culprit(overrides, text) == "+norm.eps=1"
    assert override_culprit(overrides, "Key 'x' is not in struct full_key: seed") == "seed=3"
    assert override_culprit(["a=1", "ab.c=2"], "something about ab.c") == "ab.c=2"  # longest
    assert override_culprit(["a=1"], "nothing here") is None


@pytest.mark.parametrize("command", ["check-forward", "reference", "exercise"])
def test_a_command_run_below_the_repository_root_is_refused(command, monkeypatch, capsys):
    """From ``src/`` the configs' relative out dirs (``outputs/...``) would land inside the
    tracked tree: exit 2 naming the project root, nothing written."""
    from rmsnorm_kernel.paths import REPO_ROOT

    below = REPO_ROOT / "src"
    monkeypatch.chdir(below)
    before = sorted(p.name for p in below.iterdir())
    assert main([command, "campaign.grids=[smoke]"]) == 2
    assert f"run from the project root {REPO_ROOT.resolve()}" in capsys.readouterr().err
    assert sorted(p.name for p in below.iterdir()) == before
