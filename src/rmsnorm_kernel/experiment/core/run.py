"""``train(cfg) -> metrics``: one run of the main job, from a composed Hydra config.

Called by the ``@hydra.main`` shell (``python -m rmsnorm_kernel.train``) and directly by tests
with a config from the compose API. Everything the run writes goes under ``cfg.paths.output_dir``
except the exported weights (``cfg.paths.checkpoint_dir``, names unique per config). Nothing here
is specific to one model: the datamodule, LightningModule, callbacks and logger all come from the
config, and ``metrics.json`` is whatever the callbacks recorded.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from ..exports.checkpoint import CheckpointError, load_checkpoint
from .callbacks import ExportFailed, RecordRunIdentity, SaveOnInterrupt
from .identity import (
    check_resume,
    config_hash,
    hydra_overrides,
    resume_source,
    run_identity,
    run_label,
    runs_root,
)
from .processes import processes_to_start, spawn, stop_on_request
from .settings import SettingsError, check_ckpt_path, check_train_config

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
PROBE_FILE = "initial_probe.safetensors"
#: Exit status of a run stopped by SIGTERM or Ctrl-C (128 + the signal number, as shells say).
SIGTERM_EXIT = 143
CTRL_C_EXIT = 130


def build(cfg: DictConfig) -> tuple[L.LightningDataModule, L.LightningModule]:
    """Seed everything, then build the datamodule and the LightningModule.

    The seed is set immediately before the model is built, and no norm draws random numbers, so
    every branch with the same ``cfg.seed`` starts from bitwise-equal weights.
    """
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.dataset)
    model = instantiate(cfg.model)
    return datamodule, model


def _callbacks(cfg: DictConfig) -> dict[str, L.Callback]:
    """``cfg.callbacks`` built, by name (a ``null`` entry switches a callback off).

    ``trainer.enable_checkpointing: false`` means no Lightning checkpoint at all: the
    ``ModelCheckpoint`` and :class:`~.callbacks.SaveOnInterrupt` entries are left out (SIGTERM
    then just stops the run)."""
    built = {
        name: instantiate(node)
        for name, node in (cfg.get("callbacks") or {}).items()
        if node is not None and "_target_" in node
    }
    if cfg.trainer.get("enable_checkpointing") is False:
        from lightning.pytorch.callbacks import ModelCheckpoint

        built = {
            k: c for k, c in built.items() if not isinstance(c, ModelCheckpoint | SaveOnInterrupt)
        }
    return built


def _checkpointing(cfg: DictConfig, callbacks: dict[str, L.Callback]) -> bool:
    """``trainer.enable_checkpointing`` when set; otherwise whether a ``ModelCheckpoint`` is
    configured, so ``callbacks.model_checkpoint: null`` does not let Lightning add its default."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    asked = cfg.trainer.get("enable_checkpointing")
    if asked is not None:
        return bool(asked)
    return any(isinstance(c, ModelCheckpoint) for c in callbacks.values())


def build_trainer(cfg: DictConfig) -> tuple[L.Trainer, dict[str, L.Callback], Any]:
    """The trainer ``fit_and_test`` uses, its callbacks by name, and its logger (or False)."""
    callbacks = _callbacks(cfg)
    callbacks["run_identity"] = RecordRunIdentity(run_identity(cfg))
    if (stop := stop_on_request()) is not None:  # a DDP child: SIGTERM/Ctrl-C come this way
        callbacks["stop_on_request"] = stop
    logger = instantiate(cfg.logger) if cfg.get("logger") else False
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        callbacks=list(callbacks.values()),
        logger=logger,
        enable_checkpointing=_checkpointing(cfg, callbacks),
    )
    return trainer, callbacks, logger


def _warm_start(cfg: DictConfig, model: L.LightningModule, ckpt_path: str) -> None:
    """Start from the weights of an exported safetensors checkpoint: its metadata and header
    checked against this config's net first (:func:`~.settings.check_ckpt_path`, as in the
    pre-check: a :class:`SettingsError` naming what differs), then loaded."""
    check_ckpt_path(cfg)
    try:
        tensors, _ = load_checkpoint(Path(ckpt_path))
    except CheckpointError as e:  # the file's tensors themselves unreadable (truncated data)
        raise SettingsError(f"ckpt_path: {' '.join(str(e).split())}") from e
    model.net.load_state_dict({k: tensors[k] for k in model.net.state_dict()}, strict=True)
    log.info("initial weights from %s", ckpt_path)


def _fill_identity(cfg: DictConfig) -> None:
    """Set ``cfg.config_hash`` and ``cfg.run_label`` (the run's name in TensorBoard)."""
    with open_dict(cfg):
        cfg.config_hash = config_hash(cfg)
        if cfg.get("run_label") is None:
            cfg.run_label = run_label(cfg)


def _resolve_resume(cfg: DictConfig) -> dict[str, Any] | None:
    """Check ``cfg.ckpt_path`` (a ``last.ckpt``) against this run; ``auto`` becomes this branch's
    and config's newest unfinished run under ``paths.runs_root``, or null (start from scratch).
    Returns the checkpoint's recorded identity (None when not resuming).

    Raises :class:`~.identity.ResumeRefused` for another branch's or config's checkpoint, or one
    already at ``trainer.max_steps`` (the pre-check refuses them first, the same way)."""
    ckpt_path = cfg.get("ckpt_path")
    found = resume_source(cfg, exclude=Path(cfg.paths.output_dir))
    if ckpt_path == "auto":
        root = runs_root(cfg)
        with open_dict(cfg):
            cfg.ckpt_path = None if found is None else str(found)
        if found is None:
            log.info("ckpt_path=auto: no unfinished run of norm=%s under %s", cfg.norm.name, root)
            print(
                f"ckpt_path=auto: nothing to resume for norm={cfg.norm.name} under {root}: "
                "starting from step 0",
                flush=True,
            )
            return None
        print(f"ckpt_path=auto: norm={cfg.norm.name} resumes from {found}", flush=True)
    if found is None:
        return None
    return check_resume(cfg, found)


def fit_and_test(cfg: DictConfig) -> dict[str, Any]:
    """Build, fit and test in this process; return what this rank measured.

    Under DDP every process runs this (started by :func:`~.processes.spawn` or by a cluster); the
    callbacks keep exports and probes to global rank 0 and reduce what spans ranks.
    """
    # Seconds per phase (build, fit, test): at LLM width a run took ~150 s for ~3 s of training
    # steps on the H200, so where the rest goes has to be visible in metrics.json.
    phase_s: dict[str, float] = {}
    t0 = time.perf_counter()
    datamodule, model = build(cfg)
    phase_s["build"] = time.perf_counter() - t0
    trainer, callbacks, logger = build_trainer(cfg)
    if logger:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))

    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path and str(ckpt_path).endswith(".safetensors"):
        _warm_start(cfg, model, ckpt_path)
        ckpt_path = None
    export_error = None
    trains = cfg.get("train", True)
    if trains:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        t0 = time.perf_counter()
        try:
            trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
        except SIGTERMException as e:
            # Lightning's SIGTERMException is a SystemExit without a code, which would exit 0.
            ctrl_c = any(getattr(c, "stopped_by_ctrl_c", False) for c in callbacks.values())
            raise SystemExit(CTRL_C_EXIT if ctrl_c else SIGTERM_EXIT) from e
        except ExportFailed as e:  # trained, last.ckpt saved: test, record, then fail
            export_error = str(e)
        phase_s["fit"] = time.perf_counter() - t0
    if cfg.get("test", True):
        t0 = time.perf_counter()
        # train=false with a last.ckpt: test that checkpoint's weights, not the fresh ones.
        tested = None if trains else ckpt_path
        trainer.test(model, datamodule=datamodule, verbose=False, ckpt_path=tested)
        phase_s["test"] = time.perf_counter() - t0

    metrics: dict[str, Any] = {
        "run_name": cfg.run_name,
        "run_label": cfg.run_label,
        "norm": cfg.norm.name,
        "seed": int(cfg.seed),
        "config_hash": cfg.config_hash,
        "output_dir": str(cfg.paths.output_dir),
        "log_dir": trainer.log_dir if logger else None,
        # the device training ran on (the model itself is back on the CPU after teardown)
        "device": str(trainer.strategy.root_device),
        "world_size": trainer.world_size,  # processes that trained together (DDP), else 1
        "global_rank": trainer.global_rank,
        "phase_s": {k: round(v, 3) for k, v in phase_s.items()},
    }
    for callback in callbacks.values():
        metrics.update(getattr(callback, "result", {}))
    if export_error is not None:
        metrics["export_error"] = export_error
    return metrics


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, check and test one run; return its metrics (also written to ``metrics.json``).

    With ``trainer=ddp`` on several devices of this host, one process per device is started
    here (:mod:`.processes`) and rank 0's metrics are returned; ``metrics.json`` is written once,
    by this process (or by global rank 0 where a cluster started the processes).

    Returns:
        ``{"run_name", "run_label", "norm", "seed", "config_hash", "overrides", "output_dir",
        "device", "world_size", "global_rank", "phase_s", "wall_time_s"}`` (``phase_s``: seconds
        spent building, fitting and testing, each with its callbacks) plus what the callbacks
        recorded: with the default callbacks ``forward_calls``, ``backward_calls``,
        ``expected_calls``, ``session_steps``, ``train_steps`` (the total, resumed steps
        included), ``checkpoint``, ``checkpoint_sha256``, ``reload_max_diff``,
        ``reload_tensor_max_diff`` and the test metric (``test/mse``), and ``resumed_from`` (the
        ``last.ckpt`` this run resumed from, or null); under DDP also
        ``forward_calls_per_rank`` and ``backward_calls_per_rank``. Keys of checks that did not
        run (``train=false``, ``test=false``) are absent.

    Raises:
        SettingsError: a config value, path or ``ckpt_path`` breaks its rule (one line naming the
            key, the rule and the value), before anything is written.
        CheckFailed: from a callback whose check failed (in any rank).
        ExportFailed: the export could not be written; raised after ``metrics.json`` (with
            ``export_error``) and ``last.ckpt`` are saved.
        SystemExit: 143 after SIGTERM, 130 after Ctrl-C (``last.ckpt`` saved first by the
            interrupt callback; with ``trainer.enable_checkpointing: false`` nothing is saved).
    """
    # Every value, path and checkpoint rule, before anything is built or written (a bad
    # tolerance, trainer setting or ckpt_path fails now, not after hours of training).
    check_train_config(cfg)
    nprocs = processes_to_start(cfg.trainer)  # checked above: the number of processes to start
    start = time.perf_counter()
    _fill_identity(cfg)
    resumed = _resolve_resume(cfg)  # another branch's or config's last.ckpt: refused here
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if resumed is not None:
        # The first-batch probe was taken before step 0, in the run that stopped: the sweep
        # comparison reads it from this run's dir.
        probe = Path(resumed.get("run_dir", "")) / PROBE_FILE
        if probe.is_file() and not (output_dir / PROBE_FILE).exists():
            shutil.copyfile(probe, output_dir / PROBE_FILE)
    # In-memory tensors: DataLoader workers would only add process start-up time.
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")

    metrics = spawn(fit_and_test, cfg, nprocs) if nprocs > 1 else fit_and_test(cfg)
    metrics["resumed_from"] = cfg.get("ckpt_path") if resumed is not None else None
    metrics["overrides"] = hydra_overrides()  # the parent's: children have no Hydra state
    metrics["wall_time_s"] = round(time.perf_counter() - start, 3)
    if metrics["global_rank"] == 0:  # other ranks of a cluster-started run write nothing
        (output_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
        log.info("metrics: %s", metrics)
    if metrics.get("export_error"):  # metrics.json and last.ckpt are kept; the run still fails
        raise ExportFailed(metrics["export_error"])
    return metrics
