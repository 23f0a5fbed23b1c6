"""`data`: the MLP task's synthetic train/val/test splits as safetensors + ``manifest.json``
(sizes, seed, sha256), generated twice and required to be bitwise equal (the task is
deterministic in its config). The tutorial's "three synthetic partitions"; training itself makes
the same splits in memory from the same config (``dataset=synthetic``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from rmsnorm_kernel.cli.validate import ConfigError, count, number, seed

SPLIT_KEYS = (
    "in_features",
    "out_features",
    "teacher_hidden",
    "noise",
    "n_train",
    "n_val",
    "n_test",
    "seed",
)


#: What each key of SPLIT_KEYS must be (the rules training's settings check applies to
#: the sizes and seed, ``experiment/core/settings.py``): every split holds at least one row.
SIZES = ("in_features", "out_features", "teacher_hidden", "n_train", "n_val", "n_test")


def check_dataset(dataset_cfg: Mapping) -> None:
    """The splits' config, before anything is made or written: the MLP task's keys (``dataset``
    must be ``synthetic``), sizes integers >= 1 (an empty split is refused, as training refuses
    it), ``seed`` an integer in [0, 2**32 - 1], ``noise`` a finite number >= 0.

    Raises :class:`ConfigError` naming the key and the rule.
    """
    missing = [k for k in SPLIT_KEYS if k not in dataset_cfg]
    if missing:
        target = dataset_cfg.get("_target_", "?") if hasattr(dataset_cfg, "get") else "?"
        raise ConfigError(
            f"dataset must be the MLP task's synthetic splits (dataset=synthetic): `data` writes "
            f"those only; dataset.{missing[0]} is missing (dataset is {target})"
        )
    for key in SIZES:
        count(dataset_cfg[key], f"dataset.{key}", minimum=1)
    seed(dataset_cfg["seed"], "dataset.seed")
    number(dataset_cfg["noise"], "dataset.noise")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_splits(dataset_cfg: Mapping, out_dir: Path) -> dict:
    """Write train/val/test as safetensors with a manifest; returns the manifest. Raises
    :class:`ConfigError` (:func:`check_dataset`) before writing anything."""
    from safetensors.torch import save_file

    from rmsnorm_kernel.experiment.exports.checkpoint import sort_metadata
    from rmsnorm_kernel.experiment.mlp.data import make_splits

    check_dataset(dataset_cfg)  # an empty split or a bad size: refused before any output
    splits = make_splits(dataset_cfg)
    again = make_splits(dataset_cfg)
    deterministic = all(torch.equal(splits[k][i], again[k][i]) for k in splits for i in (0, 1))
    out_dir.mkdir(parents=True, exist_ok=True)
    # Only what make_splits reads: other dataset keys (batch order, batch sizes) name training
    # knobs that do not change the splits and need training's root config to resolve.
    cfg = {key: dataset_cfg[key] for key in SPLIT_KEYS}
    manifest = {
        "seed": int(dataset_cfg["seed"]),
        "dataset": cfg,
        "deterministic": deterministic,
        "splits": {},
    }
    for name, (inputs, targets) in splits.items():
        path = out_dir / f"{name}.safetensors"
        save_file(
            {"inputs": inputs.contiguous(), "targets": targets.contiguous()},
            str(path),
            metadata={"split": name, "seed": str(manifest["seed"])},
        )
        sort_metadata(path)  # else the metadata order, and so the sha256, varies per process
        manifest["splits"][name] = {
            "file": path.name,
            "rows": int(inputs.shape[0]),
            "inputs": {"shape": list(inputs.shape), "dtype": str(inputs.dtype)},
            "targets": {"shape": list(targets.shape), "dtype": str(targets.dtype)},
            "bytes": path.stat().st_size,
            "sha256": _sha256(path),
        }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def run_data(cfg, out_dir: Path, console: Console | None = None) -> int:
    """Write the splits of ``cfg.dataset`` to ``out_dir``; 0 when they are deterministic."""
    console = console or Console()
    manifest = write_splits(cfg.dataset, out_dir)
    table = Table(title=f"synthetic splits -> {out_dir} (data seed {manifest['seed']})")
    for col in ("split", "inputs", "targets", "sha256"):
        table.add_column(col)
    for name, s in manifest["splits"].items():
        table.add_row(
            name, str(s["inputs"]["shape"]), str(s["targets"]["shape"]), s["sha256"][:16] + "..."
        )
    console.print(table)
    ok = manifest["deterministic"]
    if not ok:
        console.print("[red]FAIL[/red] make_splits is not deterministic in its config")
    verdict = "[green]PASS[/green]" if ok else "[red]FAIL[/red]"
    console.print(f"{verdict} data: 3 splits, manifest {out_dir / 'manifest.json'}")
    return 0 if ok else 1
