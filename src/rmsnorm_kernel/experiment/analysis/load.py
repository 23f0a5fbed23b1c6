"""The one loader: each run's ``metrics.json``, first-batch probe and TensorBoard curves.

Every comparison reads runs through here: the sweep verdict (:mod:`.report`) and the DDP
equivalence (:mod:`.equivalence`). Curves come from the TensorBoard event files under the log dir
``metrics.json`` names (tbparse), one value per step (the last one logged at that step).

A sweep is compared whole or not at all: :func:`sweep_runs` checks the job dirs against the jobs
the sweep's ``multirun.yaml`` records (a job that crashed or has not finished has no
``metrics.json``) and names every missing one. Paths a run recorded (its log dir, its export) are
read from the run's own dir when the sweep was moved or copied, and a relative one from the
directory the run was launched from (:func:`recorded_path`).

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
#: What Hydra's sweeper writes to the sweep dir before it launches any job: the sweep's config,
#: with the command-line overrides (``hydra.overrides.task``) that define its jobs.
MULTIRUN_FILE = "multirun.yaml"
#: The missing jobs an incomplete sweep's error names (then "and N more").
MAX_NAMED = 5


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


def _job_num(name: str) -> int | None:
    """The job number a Hydra job dir starts with (``3_triton`` -> 3), or None."""
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def find_runs(sweep_dir: Path) -> list[Path]:
    """Run dirs of a sweep (those with ``metrics.json``), in job order."""
    runs = [p.parent for p in Path(sweep_dir).glob(f"*/{METRICS_FILE}")]

    def job_num(p: Path) -> tuple[int, str]:
        num = _job_num(p.name)
        return (1 << 30 if num is None else num, p.name)

    return sorted(runs, key=job_num)


def sweep_jobs(sweep_dir: Path) -> list[dict[str, str]] | None:
    """The jobs of a sweep, in job order, as ``multirun.yaml`` records them: for each job the
    overrides that vary between jobs (``[{"norm": "reference"}, {"norm": "triton"}]``).

    None when the file is absent or records no command-line overrides (not written by Hydra), or
    when the sweep's jobs cannot be listed from it (a sweeper other than Hydra's basic one).
    Raises :class:`ComparisonError` when the file is not readable YAML.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(sweep_dir) / MULTIRUN_FILE
    if not path.is_file():
        return None
    try:
        saved = OmegaConf.load(path)
    except (OmegaConfBaseException, ValueError, OSError) as e:  # yaml errors are ValueErrors
        raise ComparisonError(f"{path}: not a readable {MULTIRUN_FILE} ({_one_line(e)})") from e
    task = OmegaConf.select(saved, "hydra.overrides.task", default=None)
    if task is None:
        return None
    sweeper = str(OmegaConf.select(saved, "hydra.sweeper._target_", default="") or "")
    if sweeper and not sweeper.endswith(".BasicSweeper"):
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    params = OmegaConf.select(saved, "hydra.sweeper.params", default=None) or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + [str(o) for o in task]
    try:  # the sweeper's own expansion: one job per combination, in launch order
        overrides = OverridesParser.create().parse_overrides(arguments)
        jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    except HydraException:  # e.g. glob() of a config group needs the config loader
        return None
    pairs = [[o.partition("=")[::2] for o in job] for job in jobs]
    varying = {k for i, job in enumerate(pairs) for k, v in job if v != dict(pairs[0]).get(k)}
    return [{k: v for k, v in job if k in varying} for job in pairs]


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _describe_job(num: int, overrides: dict[str, str] | None) -> str:
    swept = ",".join(f"{k}={v}" for k, v in (overrides or {}).items())
    return f"job {num} ({swept})" if swept else f"job {num}"


def sweep_runs(sweep_dir: Path) -> list[Path]:
    """The run dirs of a finished sweep, in job order (:func:`find_runs`), once every job of it
    has finished.

    The jobs are those ``multirun.yaml`` records (:func:`sweep_jobs`), found by the job number
    their dir name starts with (Hydra's ``<num>_<norm>``); without that record, the numbered job
    dirs present, from 0 to the highest. Raises :class:`ComparisonError` naming every job without
    ``metrics.json`` (crashed, still running, never started) and every finished job dir that is
    not one of the sweep's jobs: comparing the rest would judge a sweep that did not run.
    """
    sweep_dir = Path(sweep_dir)
    jobs = sweep_jobs(sweep_dir)
    dirs: dict[int, list[Path]] = {}
    if sweep_dir.is_dir():
        for p in sorted(sweep_dir.iterdir()):
            num = _job_num(p.name)
            if num is not None and p.is_dir():
                dirs.setdefault(num, []).append(p)
    expected = range(len(jobs)) if jobs is not None else range(max(dirs, default=-1) + 1)
    problems = []
    for num in expected:
        found = dirs.get(num, [])
        if any((d / METRICS_FILE).is_file() for d in found):
            continue
        job = _describe_job(num, jobs[num] if jobs is not None else None)
        if found:
            names = ", ".join(f"{d.name}/" for d in found)
            problems.append(f"{job} has no {METRICS_FILE} in {names} (crashed or not finished)")
        else:
            problems.append(f"{job} has no job dir (not started)")
    extra = [
        d.name
        for num, found in sorted(dirs.items())
        if num not in expected
        for d in found
        if (d / METRICS_FILE).is_file()
    ]
    if extra:
        problems.append(
            f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not among the "
            f"{len(expected)} jobs its {MULTIRUN_FILE} records"
        )
    if problems:
        total = f"{len(expected)} job{'s' if len(expected) != 1 else ''}"
        if len(problems) > MAX_NAMED:  # one readable line, however large the sweep
            problems = [*problems[:MAX_NAMED], f"and {len(problems) - MAX_NAMED} more"]
        raise ComparisonError(
            f"sweep {sweep_dir} ({total}) is incomplete: {'; '.join(problems)}; compare it once "
            "every job has finished (or rerun the sweep)"
        )
    return find_runs(sweep_dir)


def read_curves(log_dir: Path) -> dict[str, tuple[list[int], list[float]]]:
    """``{tag: (steps, values)}`` of every scalar in the TensorBoard logs under ``log_dir``."""
    from tbparse import SummaryReader

    if not Path(log_dir).is_dir():
        raise ComparisonError(f"no TensorBoard log dir {log_dir}")
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


def launch_dir(run_dir: Path) -> Path | None:
    """The directory the run was launched from (Hydra's ``hydra.runtime.cwd``, saved in the run's
    ``.hydra/hydra.yaml``), or None when the run saved none or it cannot be read."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(run_dir) / ".hydra" / "hydra.yaml"
    if not path.is_file():
        return None
    try:
        cwd = OmegaConf.select(OmegaConf.load(path), "hydra.runtime.cwd", default=None)
    except (OmegaConfBaseException, ValueError, OSError):  # yaml errors are ValueErrors
        return None
    return Path(str(cwd)) if cwd else None


def recorded_path(run_dir: Path, metrics: dict[str, Any], key: str) -> Path | None:
    """The path ``metrics.json`` records under ``key`` (``log_dir``, ``checkpoint``), read from
    the run's own dir when the run was moved or copied since; None when it records none.

    A recorded path inside the run's recorded ``output_dir`` (or under a dir of the run dir's
    name: ``.../<sweep>/1_triton/tensorboard/...``) is taken from ``run_dir`` when it is there,
    so a copied sweep reads its own files, not the original's. A relative path (the export under
    ``paths.checkpoint_dir=checkpoints``) was written relative to the directory the run was
    launched from: it is looked up there (:func:`launch_dir`), then relative to the current
    directory. Raises :class:`ComparisonError` naming the run and every place tried when none
    exists.
    """
    value = metrics.get(key)
    if not value:
        return None
    recorded, run_dir = Path(value), Path(run_dir)
    tails = []
    if metrics.get("output_dir"):
        try:
            tails.append(recorded.relative_to(Path(metrics["output_dir"])))
        except ValueError:
            pass
    parts = recorded.parts
    if run_dir.name in parts[:-1]:
        at = len(parts) - 1 - parts[::-1].index(run_dir.name)  # the last such dir
        tails.append(Path(*parts[at + 1 :]))
    tried = [run_dir / tail for tail in tails]
    if not recorded.is_absolute():
        launched = launch_dir(run_dir)
        if launched is not None:
            tried.append(launched / recorded)
        tried.append(Path.cwd() / recorded)
    else:
        tried.append(recorded)
    for path in dict.fromkeys(tried):  # in order, each once
        if path.exists():
            return path
    where = ", ".join(str(p) for p in dict.fromkeys(tried))
    raise ComparisonError(
        f"run {run_dir}: its {key} {recorded} (as its {METRICS_FILE} records it) does not "
        f"exist; tried {where}"
    )


def load_run(run_dir: Path) -> Run:
    """The run in ``run_dir``; its curves come from the log dir ``metrics.json`` names (read from
    ``run_dir`` when the sweep was moved: :func:`recorded_path`)."""
    run_dir = Path(run_dir)
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise ComparisonError(f"{run_dir}: no {METRICS_FILE} (the run did not finish)")
    try:
        metrics = json.loads(path.read_text())
    except (ValueError, OSError) as e:  # cut short by a crash mid-write, or not JSON
        raise ComparisonError(f"{path}: not a readable {METRICS_FILE} ({_one_line(e)})") from e
    if not isinstance(metrics, dict) or not isinstance(metrics.get("norm"), str):
        raise ComparisonError(f"{path}: not a run's {METRICS_FILE} (it records no norm)")
    if metrics.get("export_error"):
        raise ComparisonError(f"{run_dir}: the run failed: {metrics['export_error']}")
    probe_path = run_dir / PROBE_FILE
    probe = load_file(str(probe_path)) if probe_path.is_file() else None
    log_dir = recorded_path(run_dir, metrics, "log_dir")
    curves = read_curves(log_dir) if log_dir else {}
    return Run(dir=run_dir, metrics=metrics, probe=probe, curves=curves)
