"""Loading a checkpoint runs no code named by the file: every metadata field is checked, and names
only select entries of the builders' allow-lists."""

from __future__ import annotations

import builtins
import json
import os
import shutil
from pathlib import Path

import hydra.utils
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rmsnorm_kernel.experiment.core import builders
from rmsnorm_kernel.experiment.exports.checkpoint import METADATA_FIELDS, verify_checkpoint
from rmsnorm_kernel.experiment.exports.reload import CheckpointError, check_checkpoints, main


def _payloads(scratch: Path, marker: Path) -> dict[str, str]:
    """Strings an attacker could put in a field: Hydra targets as JSON, and bare dotted names."""
    return {
        "open_target": json.dumps({"_target_": "builtins.open", "_args_": [str(scratch), "w"]}),
        "system_target": json.dumps({"_target_": "os.system", "_args_": [f"touch {marker}"]}),
        "open_name": "builtins.open",
        "system_name": "os.system",
    }


def _net_payloads(spec: dict, scratch: Path, marker: Path) -> dict[str, dict]:
    """Specs that look valid but smuggle a callable in through the builder, the norm or a size."""
    opener = {"_target_": "builtins.open", "_args_": [str(scratch), "w"]}
    return {
        "builder_open": {**spec, "builder": "builtins.open"},
        "builder_system": {**spec, "builder": "os.system"},
        "norm_open": {**spec, "norm": "builtins.open"},
        "norm_target": {**spec, "norm": opener},
        "size_target": {**spec, "hidden_features": opener},
        "extra_target": {**spec, "_target_": "builtins.open", "_args_": [str(scratch), "w"]},
        "unknown_argument": {**spec, "file": str(scratch)},
        "system_argument": {**spec, "hidden_features": {"_target_": "os.system", "_args_": ["x"]}},
    }


@pytest.fixture
def reference_file(trained_pair, tmp_path) -> Path:
    src = Path(trained_pair["reference"]["checkpoint"])
    return Path(shutil.copy(src, tmp_path / "good.safetensors"))


@pytest.fixture
def spy(monkeypatch, tmp_path):
    """Records any call to the dangerous callables while a checkpoint is being verified."""
    calls: list[tuple] = []
    real_open = builtins.open
    watched = str(tmp_path / "scratch.txt")

    def open_spy(file, *args, **kwargs):
        if str(file) == watched:
            calls.append(("open", file, args))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_spy)
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(("os.system", a)))
    monkeypatch.setattr(hydra.utils, "instantiate", lambda *a, **k: calls.append(("hydra", a)))
    return calls


def _plant(src: Path, dst: Path, field: str, value: str) -> Path:
    with safe_open(str(src), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = dict(f.metadata())
    meta[field] = value
    save_file(tensors, str(dst), metadata=meta)
    return dst


def _assert_refused(path: Path, field: str, scratch: Path, marker: Path, calls: list) -> None:
    before = (scratch.read_text(), scratch.stat().st_mtime_ns)
    with pytest.raises(CheckpointError, match=rf"field '{field}'|field\(s\)"):
        verify_checkpoint(path)
    assert (scratch.read_text(), scratch.stat().st_mtime_ns) == before
    assert not marker.exists()
    assert calls == []


@pytest.mark.parametrize("field", METADATA_FIELDS)
def test_malicious_value_in_every_metadata_field_is_refused_uncalled(
    field, reference_file, tmp_path, spy
):
    scratch, marker = tmp_path / "scratch.txt", tmp_path / "marker"
    scratch.write_text("precious")
    for name, value in _payloads(scratch, marker).items():
        path = _plant(reference_file, tmp_path / f"{field}_{name}.safetensors", field, value)
        _assert_refused(path, field, scratch, marker, spy)


def test_malicious_specs_in_the_net_field_are_refused_uncalled(reference_file, tmp_path, spy):
    scratch, marker = tmp_path / "scratch.txt", tmp_path / "marker"
    scratch.write_text("precious")
    with safe_open(str(reference_file), framework="pt") as f:
        spec = json.loads(f.metadata()["net"])
    for name, bad in _net_payloads(spec, scratch, marker).items():
        path = _plant(reference_file, tmp_path / f"net_{name}.safetensors", "net", json.dumps(bad))
        _assert_refused(path, "net", scratch, marker, spy)


def test_an_extra_metadata_field_is_refused(reference_file, tmp_path):
    path = _plant(reference_file, tmp_path / "extra.safetensors", "_target_", "builtins.open")
    with pytest.raises(CheckpointError, match=r"unknown field\(s\) \['_target_'\]"):
        verify_checkpoint(path)


def test_unknown_builder_error_names_the_field_and_the_allowed_names(reference_file, tmp_path):
    with safe_open(str(reference_file), framework="pt") as f:
        spec = json.loads(f.metadata()["net"])
    path = _plant(
        reference_file, tmp_path / "b.safetensors", "net", json.dumps({**spec, "builder": "gpt"})
    )
    with pytest.raises(CheckpointError, match=r"net'\.builder: unknown builder 'gpt'; allowed: \["):
        verify_checkpoint(path)
    assert main(["--ckpt", str(path)]) == 1


def test_the_good_file_still_reloads(reference_file, spy):
    assert verify_checkpoint(reference_file)["reload_max_diff"] == 0.0
    assert spy == []


def test_registered_builders_and_norms_extend_the_allow_lists(tmp_path, monkeypatch):
    monkeypatch.setattr(builders, "BUILDERS", dict(builders.BUILDERS))
    monkeypatch.setattr(builders, "NORMS", dict(builders.NORMS))

    def tiny(width: int, norm: str) -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(width, width), builders.resolve_norm(norm)(width)
        )

    builders.register_builder("tiny", tiny)
    builders.register_norm("plain", torch.nn.RMSNorm)
    net = builders.build_net("tiny", width=3, norm="plain")
    assert isinstance(net[1], torch.nn.RMSNorm)
    with pytest.raises(builders.SpecError, match=r"net\.norm: unknown norm 'rocket'"):
        builders.build_net("tiny", width=3, norm="rocket")
    with pytest.raises(ValueError, match="builder name must be an identifier"):
        builders.register_builder("os.system", tiny)


def test_check_checkpoints_refuses_a_planted_file_among_good_ones(reference_file, tmp_path):
    _plant(reference_file, tmp_path / "zz_bad.safetensors", "device", "builtins.open")
    with pytest.raises(CheckpointError, match=r"zz_bad.*field 'device' must be one of"):
        check_checkpoints(root=tmp_path)


def test_a_provider_that_cannot_be_imported_is_named_in_the_error(monkeypatch):
    monkeypatch.setattr(builders, "PROVIDERS", ["rmsnorm_kernel.experiment.no_such_provider"])
    monkeypatch.setattr(builders, "_provider_errors", {})
    with pytest.raises(builders.SpecError, match=r"no_such_provider not importable \(Module"):
        builders.check_spec({"builder": "gpt"})


def test_a_diverged_nets_file_is_refused(reference_file, tmp_path):
    """NaN weights reload as NaN, bit for bit: check-checkpoints used to pass such a file (a
    diverged run's) as a reproducible result."""
    with safe_open(str(reference_file), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = dict(f.metadata())
    name = next(k for k, v in tensors.items() if v.is_floating_point() and "weight" in k)
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    bad = tmp_path / "diverged.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' holds NaN or inf"):
        verify_checkpoint(bad)
