"""What makes a run this run: its config hash, its command-line overrides, its TensorBoard name.

- :func:`config_hash`: 12 hex digits of sha256 over the resolved config, leaving out where things
  are written (``paths``, ``callbacks``, ``logger``) so the same experiment has the same hash
  wherever it runs; it names exported checkpoints, so two configs never share a file name.
- :func:`hydra_overrides`: this job's command-line overrides (``{"seed": "1", "norm": "triton"}``),
  recorded in ``metrics.json``; the sweep comparison groups runs by them.
- :func:`run_label`: ``norm=triton,seed=1,hidden_features=32``: the branch, the seed and every
  other override the sweep varies, used as the TensorBoard run name so its run filter separates
  branches, seeds and groups.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

#: Keys that say where outputs go, not what is trained or measured.
UNHASHED = ("paths", "callbacks", "logger", "config_hash", "run_label")


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
