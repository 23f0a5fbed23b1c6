"""The main job's entry point: ``python -m rmsnorm_kernel.train [overrides]``.

A thin Hydra shell around :func:`rmsnorm_kernel.experiment.run.train`. Examples::

    python -m rmsnorm_kernel.train norm=triton seed=3 trainer.max_steps=50
    python -m rmsnorm_kernel.train --multirun norm=reference,triton      # make train
"""

from __future__ import annotations

from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from rmsnorm_kernel.experiment.paths import CONFIG_DIR
from rmsnorm_kernel.experiment.run import train


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> dict[str, Any]:
    if cfg.paths.output_dir is None:  # default: everything under this run's Hydra dir
        with open_dict(cfg):
            cfg.paths.output_dir = HydraConfig.get().runtime.output_dir
    return train(cfg)


if __name__ == "__main__":
    main()
