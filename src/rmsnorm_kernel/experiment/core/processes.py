"""One process per device for ``trainer=ddp``, started by ``train(cfg)`` itself.

Lightning's own ``ddp`` launcher re-runs the command line in each child (``sys.argv``, plus
``hydra.run.dir=...`` under Hydra). That breaks both ways this project trains: a ``--multirun``
child would rerun the whole sweep into another dir, and ``train(cfg)`` called from a test would
rerun pytest. ``ddp_spawn`` pickles the trainer instead, but then what the callbacks measured
stays in the children and ``metrics.json`` would be empty.

So ``train(cfg)`` starts the processes: :func:`spawn` runs ``fn(cfg)`` in one fresh process per
local device (start method ``spawn``, which CUDA requires), with ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` set, so Lightning sees processes "created externally" (as
under torchrun) and only joins them into a process group. Every child composes nothing: it gets
the parent's resolved config, so the Hydra run dir, run label and config hash are the parent's.
Global rank 0's return value comes back to the parent; a child's exception is raised again in the
parent, with its type (``CheckFailed`` stays ``CheckFailed``).

Where a cluster already started one process per device (SLURM with ``tasks_per_node`` = GPUs, or
torchrun), :func:`processes_to_start` returns 1 and each process trains in place.
"""

from __future__ import annotations

import copy
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

#: Seconds the other children get to exit after one failed, before they are killed.
GRACE_PERIOD_S = 10.0
#: Exit statuses of a child stopped by SIGTERM (143) or Ctrl-C (130) after saving last.ckpt.
INTERRUPTED = (143, 130)


def _is_ddp(trainer_cfg: DictConfig) -> bool:
    strategy = trainer_cfg.get("strategy")
    if isinstance(strategy, str):
        return strategy == "ddp"
    return strategy is not None and str(strategy.get("_target_", "")).endswith(".DDPStrategy")


def started_externally() -> bool:
    """Whether a cluster or launcher already started one process per device (SLURM tasks,
    torchrun, or our own :func:`spawn`): Lightning then joins them instead of starting any."""
    from lightning.fabric.plugins.environments import (
        LightningEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    return (
        SLURMEnvironment.detect()
        or TorchElasticEnvironment.detect()
        or LightningEnvironment().creates_processes_externally
    )


def local_devices(trainer_cfg: DictConfig) -> int:
    """How many devices of this host ``trainer_cfg`` (``accelerator``, ``devices``) asks for."""
    from lightning.fabric.accelerators import CPUAccelerator, CUDAAccelerator

    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    devices = trainer_cfg.get("devices", "auto")
    if isinstance(devices, DictConfig) or OmegaConf.is_list(devices):
        devices = OmegaConf.to_container(devices)
    if accelerator == "auto":  # as Lightning chooses it (device_parser._select_auto_accelerator)
        accelerator = "cuda" if CUDAAccelerator.is_available() else "cpu"
    if accelerator in ("cuda", "gpu"):
        kind = CUDAAccelerator
    elif accelerator == "cpu":
        if devices in ("auto", -1, "-1"):
            raise ValueError(
                "trainer.devices: DDP on CPU needs a number of processes, e.g. "
                f"trainer.devices=2 (got {devices!r})"
            )
        kind = CPUAccelerator
    else:
        raise ValueError(
            f"trainer.accelerator: DDP here runs on 'cuda'/'gpu' or 'cpu' (got {accelerator!r})"
        )
    return len(kind.get_parallel_devices(kind.parse_devices(devices)))


def processes_to_start(trainer_cfg: DictConfig) -> int:
    """Processes :func:`spawn` must start for this trainer: the local device count for
    ``strategy: ddp`` with several devices, else 1 (one process, or started externally).

    Raises:
        ValueError: ``trainer.num_nodes`` > 1 without a cluster that starts the processes.
    """
    if not _is_ddp(trainer_cfg) or started_externally():
        return 1
    if int(trainer_cfg.get("num_nodes", 1)) > 1:
        raise ValueError(
            f"trainer.num_nodes={trainer_cfg.num_nodes}: several hosts need a cluster that starts "
            "one process per GPU (hydra/launcher=slurm with tasks_per_node = gpus_per_node, or "
            "torchrun); this launcher starts processes on one host only"
        )
    return local_devices(trainer_cfg)


def _free_port() -> int:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    return find_free_network_port()


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the parent dies (even by SIGKILL), so no rank keeps
    a GPU busy after its run is gone; elsewhere the children finish on their own."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def _child(
    local_rank: int,
    fn: Callable[[DictConfig], Any],
    cfg: DictConfig,
    world_size: int,
    port: int,
    queue: Any,
    stop: Any,
) -> None:
    """Body of child ``local_rank``: the rendezvous variables, then ``fn(cfg)``; what it
    returns (rank 0 only) or raises goes to the parent through ``queue``."""
    # Out of the parent's process group, so no signal reaches the children directly: Lightning's
    # own SIGTERM handler runs a collective inside the handler, and ranks signalled at different
    # points of a step then wait on each other forever. The parent turns SIGTERM and Ctrl-C into
    # ``stop`` instead, which every rank reads at the same step (:class:`StopOnRequest`).
    os.setpgrp()
    _die_with_parent()
    global _STOP
    _STOP = stop
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world_size),
        NODE_RANK="0",
        LOCAL_RANK=str(local_rank),
    )
    try:
        result = fn(cfg)
    except Exception as e:
        queue.put((local_rank, "error", _picklable(e), traceback.format_exc()))
        # Exit now, skipping the process group's teardown: with NCCL, destroying it while
        # another rank waits in a collective blocks this rank too (measured on 2 H200s: a rank
        # that failed in test set-up kept both alive until the 170 s limit). The parent sees the
        # exit, stops the other ranks and raises the reported exception.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    finally:
        # Left to interpreter exit, the process group's threads can be torn down in an order
        # that aborts the process ("terminate called without an active exception").
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    queue.put((local_rank, "ok", result if local_rank == 0 else None, None))


#: In a child of :func:`spawn`: the shared value the parent sets when asked to stop.
_STOP: Any = None


class StopOnRequest(L.Callback):
    """Stops every rank after the same training step when the parent of :func:`spawn` was sent
    SIGTERM or Ctrl-C, the way Lightning stops one process on SIGTERM (``SIGTERMException``: the
    interrupt callback saves ``last.ckpt``, ``train`` exits 143, or 130 for Ctrl-C).

    At the end of each step the ranks agree on whether any of them saw the request (one small
    all-reduce), so they all stop at the same step and save a consistent checkpoint.
    """

    def __init__(self, stop: Any) -> None:
        self.stop = stop
        self.stopped_by_ctrl_c = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        requested = self.stop.value
        if trainer.strategy.reduce_boolean_decision(requested != 0, all=False):
            self.stopped_by_ctrl_c = requested == signal.SIGINT
            raise SIGTERMException()


def stop_on_request() -> StopOnRequest | None:
    """The callback for a child of :func:`spawn`; None in any other process."""
    return None if _STOP is None else StopOnRequest(_STOP)


class ChildFailed(RuntimeError):
    """A child process died without reporting an exception (killed, or it called exit)."""


def spawn(fn: Callable[[DictConfig], Any], cfg: DictConfig, nprocs: int) -> Any:
    """Run ``fn(cfg)`` in ``nprocs`` new processes (ranks 0..nprocs-1); return rank 0's result.

    ``cfg`` is resolved first (children have none of the parent's Hydra state). SIGTERM or
    Ctrl-C to this process stops every rank after the same step (:class:`StopOnRequest`), which
    saves ``last.ckpt``; their exit status 143 (SIGTERM) or 130 (Ctrl-C) becomes ``SystemExit``
    with that status here. A second Ctrl-C kills the children at once.

    Raises:
        Exception: the first exception a child raised, its type kept and the child's traceback
            attached as the cause.
        ChildFailed: a child exited non-zero without an exception.
    """
    import torch.multiprocessing as mp

    resolved = copy.deepcopy(cfg)
    OmegaConf.resolve(resolved)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    stop = ctx.Value("i", 0)  # 0, or the signal that asked the run to stop
    context = mp.start_processes(
        _child,
        args=(fn, resolved, nprocs, _free_port(), queue, stop),
        nprocs=nprocs,
        join=False,
        start_method="spawn",
    )
    messages: list[tuple] = []

    def drain() -> None:  # keeps the pipe from filling while children report
        while not queue.empty():
            messages.append(queue.get())

    def request_stop(signum, frame) -> None:
        if stop.value == signal.SIGINT and signum == signal.SIGINT:
            # A second Ctrl-C: stop at once, without saving.
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise KeyboardInterrupt
        if stop.value == 0:
            stop.value = int(signum)
            what = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
            print(f"\n{what}: every rank stops after the same step, saves last.ckpt", flush=True)

    # Signal handlers can only be set from the main thread (a threaded caller keeps its own).
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if main_thread:
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, request_stop)
    failure: Exception | None = None
    try:
        while True:
            try:
                if context.join(timeout=0.5, grace_period=GRACE_PERIOD_S):
                    break
            except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
                failure = e
                break
            finally:
                drain()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    drain()
    # In arrival order: the rank that failed first reports before the ones its exit broke.
    errors = [m for m in messages if m[1] == "error"]
    if errors:
        rank, _, exc, text = errors[0]
        raise exc from ChildFailed(f"rank {rank} failed:\n{text}")
    if failure is not None:
        code = getattr(failure, "exit_code", None)
        if code in INTERRUPTED:  # stopped by SIGTERM or Ctrl-C, last.ckpt saved: pass it on
            raise SystemExit(code)
        raise ChildFailed(str(failure)) from failure
    results = [m[2] for m in messages if m[1] == "ok" and m[0] == 0]
    if not results:
        raise ChildFailed("rank 0 finished without returning its result")
    return results[0]
