"""Check campaigns (check-forward / check-backward / check-weight): cases, evaluation, reports."""

from rmsnorm_kernel.cli.campaigns.cases import Case, build_cases, make_inputs
from rmsnorm_kernel.cli.campaigns.evaluate import QUANTITY_OF, evaluate_case, reference_impl
from rmsnorm_kernel.cli.campaigns.runner import run_campaign

__all__ = [
    "QUANTITY_OF",
    "Case",
    "build_cases",
    "evaluate_case",
    "make_inputs",
    "reference_impl",
    "run_campaign",
]
