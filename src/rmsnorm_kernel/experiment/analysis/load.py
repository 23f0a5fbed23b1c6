"""The one loader: each run's ``metrics.json``, first-batch probe and TensorBoard curves.

Every comparison reads runs through here: the sweep verdict (:mod:`.report`) and the DDP
equivalence (:mod:`.equivalence`). Curves come from the TensorBoard event files under the log dir
``metrics.json`` names (tbparse), one value per step (the last one logged at that step).

The run's checks already ran inside it (the callbacks fail the run otherwise), so what
``metrics.json`` records is taken as measured; nothing here re-derives it.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from ..core.run import METRICS_FILE

PROBE_FILE = "initial_probe.safetensors"


class ComparisonError(RuntimeError):
    """The sweep cannot be compared (missing runs, files or baseline)."""


@dataclass
class Run:
    """One finished run: its dir, recorded metrics, probe tensors (or None) and curves."""

    dir: Path
    metrics: dict[str, Any]
    probe: dict[str, torch.Tensor] | None
    curves: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)

    @property
    def norm(self) -> str:
        return self.metrics["norm"]


def find_runs(sweep_dir: Path) -> list[Path]:
    """Run dirs of a sweep (those with ``metrics.json``), in job order."""
    runs = [p.parent for p in Path(sweep_dir).glob(f"*/{METRICS_FILE}")]

    def job_num(p: Path) -> tuple[int, str]:
        head = p.name.split("_", 1)[0]
        return (int(head) if head.isdigit() else 1 << 30, p.name)

    return sorted(runs, key=job_num)


def read_curves(log_dir: Path) -> dict[str, tuple[list[int], list[float]]]:
    """``{tag: (steps, values)}`` of every scalar in the TensorBoard logs under ``log_dir``."""
    from tbparse import SummaryReader

    with warnings.catch_warnings():  # tbparse calls pandas APIs pandas now deprecates
        warnings.simplefilter("ignore")
        frame = SummaryReader(str(log_dir)).scalars
    if frame.empty:
        raise ComparisonError(f"no TensorBoard scalars under {log_dir}")
    curves = {}
    for tag, group in frame.groupby("tag"):
        group = group.sort_values("step").drop_duplicates("step", keep="last")
        curves[str(tag)] = (
            group["step"].astype(int).tolist(),
            group["value"].astype(float).tolist(),
        )
    return curves


def saved_compare(run_dir: Path) -> dict[str, Any] | None:
    """The ``compare`` section the run was configured with (its Hydra ``.hydra/config.yaml``,
    resolved), or None when the run has no saved config (a run made by ``train(cfg)``)."""
    from omegaconf import OmegaConf

    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    cfg = OmegaConf.load(path)
    if "compare" not in cfg:
        return None
    return OmegaConf.to_container(cfg.compare, resolve=True)


def load_run(run_dir: Path) -> Run:
    """The run in ``run_dir``; its curves come from the log dir ``metrics.json`` names."""
    run_dir = Path(run_dir)
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise ComparisonError(f"{run_dir}: no {METRICS_FILE} (the run did not finish)")
    metrics = json.loads(path.read_text())
    if metrics.get("export_error"):
        raise ComparisonError(f"{run_dir}: the run failed: {metrics['export_error']}")
    probe_path = run_dir / PROBE_FILE
    probe = load_file(str(probe_path)) if probe_path.is_file() else None
    log_dir = metrics.get("log_dir")
    curves = read_curves(Path(log_dir)) if log_dir else {}
    return Run(dir=run_dir, metrics=metrics, probe=probe, curves=curves)
