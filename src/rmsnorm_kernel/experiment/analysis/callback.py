"""The one Hydra end-of-sweep callback: run the configured checks once every job has finished."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from .load import sweep_runs
from .report import compare_runs, format_result


class CompareOnMultirunEnd(Callback):
    """Prints the table(s) and, as the last line, the path of ``comparison.json``.

    With the throughput check (the language model's ``compare: lm``) the speed and memory table
    and the path of ``lm_comparison.json`` come first; then the comparison's table, its
    PASSED/FAILED line, the curves PNG and the path of ``comparison.json``.

    Hydra turns exceptions raised in callbacks into warnings, so failure leaves through
    ``SystemExit(1)``, which it does not catch: the process exits non-zero.

    Before any job starts, a sweep dir that already holds files is refused (exit 2): the
    comparison reads every run under it, so another sweep's runs would be judged as this one's.
    The default sweep dir is unique per command (``${unique:}`` in ``conf/hydra/default.yaml``).
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if sweep_dir.is_dir() and any(sweep_dir.iterdir()):
            print(
                f"error: hydra.sweep.dir must be a new or empty directory; {sweep_dir} already "
                "holds another sweep's files",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(2)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        settings = OmegaConf.to_container(config.get("compare") or {}, resolve=True)
        try:
            # per_run: each group by its runs' own compare config (a sweep over experiments).
            # sweep_runs: every job the sweep launched must have finished.
            result = compare_runs(sweep_runs(sweep_dir), sweep_dir, settings, per_run=True)
        except Exception as e:  # noqa: BLE001 - any failure to compare fails the sweep
            print(f"comparison failed for {sweep_dir}: {type(e).__name__}: {e}", file=sys.stderr)
            raise SystemExit(1) from e
        print(format_result(result), flush=True)
        if not result["passed"]:
            raise SystemExit(1)
