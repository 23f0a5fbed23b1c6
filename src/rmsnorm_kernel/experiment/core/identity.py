"""What makes a run this run: its config hash, its command-line overrides, its TensorBoard name.

- :func:`config_hash`: 12 hex digits of sha256 over the resolved config, leaving out where things
  are written (``paths``, ``callbacks``, ``logger``) so the same experiment has the same hash
  wherever it runs; it names exported checkpoints, so two configs never share a file name.
- :func:`hydra_overrides`: this job's command-line overrides (``{"seed": "1", "norm": "triton"}``),
  recorded in ``metrics.json``; the sweep comparison groups runs by them.
- :func:`run_label`: ``norm=triton,seed=1,hidden_features=32``: the branch, the seed and every
  other override the sweep varies, used as the TensorBoard run name so its run filter separates
  branches, seeds and groups.
- :func:`resume_config` / :func:`resume_hash`: what a Lightning checkpoint must share with the run
  that resumes from it: the config hash's contents without ``ckpt_path``, ``train``/``test`` and
  the step/epoch budget (a run stopped at step k resumes with any budget). Every ``last.ckpt``
  records them with the norm (:data:`CHECKPOINT_KEY`); :func:`check_resume` refuses another
  branch's or another config's checkpoint, naming the keys that differ.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .settings import SettingsError

log = logging.getLogger("rmsnorm_kernel")

#: Keys that say where outputs go, not what is trained or measured.
UNHASHED = ("paths", "callbacks", "logger", "config_hash", "run_label")
#: Keys a resumed run may change: where it starts from, whether it fits/tests, its budget.
RESUME_FREE = ("ckpt_path", "train", "test")
RESUME_FREE_TRAINER = ("max_steps", "max_epochs")
#: Where a Lightning checkpoint of this project records its run identity.
CHECKPOINT_KEY = "rmsnorm_kernel_run"


class ResumeRefused(SettingsError):
    """A checkpoint belongs to another branch or config (one line naming what differs)."""


def config_hash(cfg: DictConfig) -> str:
    """``sha256(resolved cfg minus UNHASHED)[:12]``, keys sorted (stable across runs)."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain = {k: v for k, v in plain.items() if k not in UNHASHED}
    text = json.dumps(plain, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _split(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def hydra_overrides() -> dict[str, str]:
    """``{key: value}`` of this job's command-line overrides; ``{}`` outside ``@hydra.main``."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    return dict(_split(o) for o in HydraConfig.get().overrides.task)


def swept_keys() -> list[str]:
    """Keys this job's multirun sweeps over (``norm=a,b``, ``seed=range(3)``...); ``[]`` otherwise.

    A job only sees its own single values, so the sweep's arguments are read back from
    ``multirun.yaml``, which Hydra's sweeper writes to the sweep dir before launching any job;
    keys of ``hydra.sweeper.params`` (sweeps defined in a config) count too.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return []
    hydra = HydraConfig.get()
    if hydra.mode != RunMode.MULTIRUN:
        return []
    keys = list((hydra.sweeper.get("params") or {}).keys())
    saved = Path(hydra.sweep.dir) / "multirun.yaml"
    if saved.is_file():
        task = OmegaConf.load(saved).hydra.overrides.task
        parsed = OverridesParser.create().parse_overrides(list(task))
        keys += [o.key_or_group for o in parsed if o.is_sweep_override()]
    return list(dict.fromkeys(keys))


def short_names(keys: list[str]) -> dict[str, str]:
    """``model.net.hidden_features`` -> ``hidden_features``, unless two keys share a last part."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def run_label(cfg: DictConfig) -> str:
    """``norm=<name>,seed=<seed>`` then every other swept override, short names, ``/`` -> ``_``."""
    values = hydra_overrides()
    parts = {"norm": str(cfg.norm.name), "seed": str(cfg.seed)}
    others = [k for k in swept_keys() if k not in ("norm", "seed")]
    for key, name in short_names(others).items():
        parts[name] = values.get(key, "?")
    return ",".join(f"{k}={v}".replace("/", "_") for k, v in parts.items())


def resume_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config a checkpoint must share with a run resuming from it (plain dict)."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain = {k: v for k, v in plain.items() if k not in (*UNHASHED, *RESUME_FREE)}
    trainer = dict(plain.get("trainer") or {})
    plain["trainer"] = {k: v for k, v in trainer.items() if k not in RESUME_FREE_TRAINER}
    return json.loads(json.dumps(plain, sort_keys=True, default=str))


def resume_hash(cfg: DictConfig) -> str:
    """12 hex digits of :func:`resume_config`."""
    text = json.dumps(resume_config(cfg), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_identity(cfg: DictConfig) -> dict[str, Any]:
    """What every Lightning checkpoint of this run records under :data:`CHECKPOINT_KEY`."""
    return {
        "norm": str(cfg.norm.name),
        "resume_hash": resume_hash(cfg),
        "config_hash": str(cfg.config_hash),
        "run_dir": str(cfg.paths.output_dir),
        "config": resume_config(cfg),
    }


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Lightning checkpoint ``path`` as a dict, its tensors memory-mapped (not read into memory).

    Loaded with ``weights_only=True``: nothing in the file is executed."""
    import torch

    try:
        try:
            checkpoint = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # a file torch.save wrote without its zip format cannot be mapped
            checkpoint = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, not a checkpoint, pickled code...
        why = _unreadable(path, e)
        raise ResumeRefused(
            f"ckpt_path must be a Lightning checkpoint of this project; {path} {why}"
        ) from e
    return checkpoint if isinstance(checkpoint, dict) else {}


#: The first bytes of what ``torch.save`` writes: a zip archive (the default since torch 1.6), or
#: a pickle stream (protocol 2+ starts with 0x80) from ``_use_new_zipfile_serialization=False``.
TORCH_SAVE_MAGIC = (b"PK\x03\x04", b"\x80")


def _unreadable(path: Path, error: Exception) -> str:
    """Why ``torch.load`` could not read ``path``, in the user's terms (torch's own message for
    a file that is not a torch.save file at all is e.g. ``KeyError: 101``, which says nothing)."""
    detail = f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:  # a dir, no permission...
        return f"cannot be opened ({type(e).__name__}: {e.strerror or e})"
    if not head:
        return "is empty (0 bytes): a run that was killed while saving? start without ckpt_path"
    if not head.startswith(TORCH_SAVE_MAGIC):
        return f"is not a file torch.save wrote (it starts with {head!r}), so not a last.ckpt"
    if "weights only load failed" in str(error).lower():
        # weights_only=True refused a pickled object beyond tensors and plain containers; nothing
        # in the file was run, and we do not load such a file (it could run code).
        return (
            "holds pickled Python objects beyond tensors and plain containers, which a "
            "weights-only load refuses (nothing in it was run): a last.ckpt of this project "
            "holds none"
        )
    return f"is a damaged or truncated torch.save file ({detail})"


def _identity(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    identity = checkpoint.get(CHECKPOINT_KEY)
    return identity if isinstance(identity, dict) else None


def read_identity(path: Path) -> dict[str, Any] | None:
    """The run identity recorded in Lightning checkpoint ``path`` (None when it has none)."""
    return _identity(read_checkpoint(path))


def check_resume(cfg: DictConfig, path: Path) -> dict[str, Any]:
    """The identity of checkpoint ``path`` if this run may resume from it, else
    :class:`ResumeRefused`: another norm (branch), another config (the differing keys named), or
    a step budget the checkpoint has already reached (a fit that would train nothing)."""
    checkpoint = read_checkpoint(path)
    identity = _identity(checkpoint)
    if identity is None:
        raise ResumeRefused(
            f"ckpt_path must be a last.ckpt recording its branch and config; {path} records "
            "none (saved by another program or an older version): start without ckpt_path"
        )
    norm = str(cfg.norm.name)
    if identity.get("norm") != norm:
        raise ResumeRefused(
            f"ckpt_path must be a checkpoint of this branch (norm={norm}); {path} is "
            f"norm={identity.get('norm')}'s: resume each branch from its own last.ckpt "
            "(ckpt_path=auto finds it)"
        )
    if identity.get("resume_hash") != resume_hash(cfg):
        ours, theirs = _flat(resume_config(cfg)), _flat(identity.get("config") or {})
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        shown = ", ".join(f"{k}={theirs.get(k)!r} (this run {ours.get(k)!r})" for k in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise ResumeRefused(
            f"ckpt_path must be a checkpoint of this config; {path} was saved with {shown}{more}"
        )
    check_budget(cfg, path, checkpoint.get("global_step"))
    return identity


def check_budget(cfg: DictConfig, path: Path, step: Any) -> None:
    """A resumed fit must have steps left: ``trainer.max_steps`` (when it is the budget, not -1)
    above the checkpoint's step, else Lightning returns at once having trained nothing.

    Raises :class:`ResumeRefused` naming the key, the checkpoint's step and the value. Nothing to
    check with ``train=false`` (no fit: the checkpoint is tested as it is)."""
    if cfg.get("train", True) is False or not isinstance(step, int):
        return
    max_steps = cfg.trainer.get("max_steps", -1) if cfg.get("trainer") else -1
    if isinstance(max_steps, int) and max_steps != -1 and max_steps <= step:
        raise ResumeRefused(
            f"trainer.max_steps must be greater than the step ckpt_path resumes from "
            f"({path} is at step {step}), or nothing is trained (got {max_steps}): raise it, or "
            "add train=false to test that checkpoint as it is"
        )


def resume_source(cfg: DictConfig, exclude: Path | None = None) -> Path | None:
    """The ``last.ckpt`` this run resumes from: ``ckpt_path`` itself, or for ``auto`` what
    :func:`find_resumable` finds under ``paths.runs_root`` (``exclude``: this run's own dir); None
    when it starts from step 0 (``null``, ``auto`` finding nothing, a ``.safetensors`` warm
    start)."""
    ckpt_path = cfg.get("ckpt_path")
    if not ckpt_path or str(ckpt_path).endswith(".safetensors"):
        return None
    if ckpt_path == "auto":
        return find_resumable(cfg, runs_root(cfg), exclude=exclude)
    return Path(ckpt_path)


def runs_root(cfg: DictConfig) -> Path:
    """Where ``ckpt_path=auto`` looks for an unfinished run: ``paths.runs_root``."""
    return Path((cfg.get("paths") or {}).get("runs_root") or "outputs")


def _resumed_by_finished_runs(root: Path) -> set[Path]:
    """The ``last.ckpt`` files finished runs under ``root`` resumed from (resolved)."""
    consumed = set()
    for metrics in root.rglob("metrics.json"):
        try:
            source = json.loads(metrics.read_text()).get("resumed_from")
        except (OSError, ValueError, AttributeError):
            continue  # not a run's metrics.json (or unreadable): it names nothing
        if isinstance(source, str) and source:
            consumed.add(Path(source).resolve())
    return consumed


#: Unreadable last.ckpt files find_resumable has warned about (once each per process).
_SKIPPED: set[Path] = set()


def find_resumable(cfg: DictConfig, root: Path, exclude: Path | None = None) -> Path | None:
    """``ckpt_path=auto``: the newest ``last.ckpt`` under ``root`` of a run of this branch and
    config that did not finish (no ``metrics.json`` beside its ``lightning_checkpoints/``) and
    that no finished run has resumed from already (its ``metrics.json``'s ``resumed_from``: the
    stopped run lives on there, and resuming it again would train the same steps twice)."""
    root = Path(root)
    if not root.is_dir():
        return None
    mine = resume_hash(cfg)
    found = []
    consumed = _resumed_by_finished_runs(root)
    for path in root.rglob("lightning_checkpoints/last.ckpt"):
        run_dir = path.parent.parent
        if (run_dir / "metrics.json").exists():
            continue  # finished: rerunning it from scratch gives the same result
        if path.resolve() in consumed:
            continue
        if exclude is not None and run_dir.resolve() == Path(exclude).resolve():
            continue
        try:
            identity = read_identity(path)
        except ResumeRefused as e:  # unreadable: whose it is cannot be told; said, not resumed
            if path.resolve() not in _SKIPPED:
                _SKIPPED.add(path.resolve())
                log.warning("ckpt_path=auto: skipping an unreadable checkpoint: %s", e)
            continue
        if (
            identity
            and identity.get("resume_hash") == mine
            and identity.get("norm") == cfg.norm.name
        ):
            found.append((path.stat().st_mtime, str(path)))
    return Path(max(found)[1]) if found else None
