"""One comparison path: every verdict on finished runs, against tolerances from conf/compare/::

load         the one loader: each run's metrics.json, first-batch probe and TensorBoard curves;
             sweep_runs: a sweep's runs once every job its multirun.yaml records has finished
curves       the one curve diff (branch - baseline at the steps both logged)
tolerances   the compare config read and checked: the checks to run and their tolerances
checks       group runs by their swept overrides; the checks (metric_delta, probe, curve,
             throughput) of each branch against the baseline, selected by compare.checks;
             the across-seed summary; the DDP equivalence of two runs of one branch
plots        the curves PNG
report       compare_runs: comparison.json (+ lm_comparison.json with the throughput check),
             the printed tables
callback     CompareOnMultirunEnd, the one Hydra end-of-sweep callback: the path of
             comparison.json is the last line printed; the process exits 1 when anything failed
equivalence  two sweeps (DDP and one process) paired by norm: the command
             ``python -m rmsnorm_kernel.cli equivalence DDP_SWEEP SINGLE_SWEEP``
"""

from .callback import CompareOnMultirunEnd
from .equivalence import compare_sweeps
from .load import ComparisonError, find_runs, load_run, sweep_runs
from .report import COMPARISON_FILE, CURVES_FILE, REPORT_FILE, compare_runs, format_table

__all__ = [
    "COMPARISON_FILE",
    "CURVES_FILE",
    "REPORT_FILE",
    "CompareOnMultirunEnd",
    "ComparisonError",
    "compare_runs",
    "compare_sweeps",
    "find_runs",
    "format_table",
    "load_run",
    "sweep_runs",
]
