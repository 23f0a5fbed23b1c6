"""Hydra callback: compare the sweep's runs once every job has finished."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from .load import find_runs
from .report import compare_runs, format_table


class CompareOnMultirunEnd(Callback):
    """Prints the table and, as the last line, the path of ``comparison.json``.

    Hydra turns exceptions raised in callbacks into warnings, so failure leaves through
    ``SystemExit(1)``, which it does not catch: the process exits non-zero.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        settings = OmegaConf.to_container(config.get("compare") or {}, resolve=True)
        try:
            result = compare_runs(find_runs(sweep_dir), sweep_dir, settings)
        except Exception as e:  # noqa: BLE001 - any failure to compare fails the sweep
            print(f"comparison failed for {sweep_dir}: {type(e).__name__}: {e}", file=sys.stderr)
            raise SystemExit(1) from e
        print(format_table(result))
        print(f"curves: {result['curves']}")
        print(result["comparison"], flush=True)
        if not result["passed"]:
            raise SystemExit(1)
