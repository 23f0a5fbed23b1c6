"""The cross-branch verdict of a sweep (Hydra ``on_multirun_end``), in three steps::

load     each run's metrics.json, first-batch probe and TensorBoard curves
checks   group runs by their swept overrides, compare branches with the baseline, seeds
plots    the curves PNG
report   compare_runs (comparison.json), the printed table
callback CompareOnMultirunEnd: runs it after a multirun; the path of comparison.json is the
         last line printed, and the process exits 1 when anything failed
"""

from .callback import CompareOnMultirunEnd
from .load import ComparisonError, find_runs, load_run
from .report import COMPARISON_FILE, CURVES_FILE, compare_runs, format_table

__all__ = [
    "COMPARISON_FILE",
    "CURVES_FILE",
    "CompareOnMultirunEnd",
    "ComparisonError",
    "compare_runs",
    "find_runs",
    "format_table",
    "load_run",
]
