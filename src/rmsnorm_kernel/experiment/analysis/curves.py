"""The one curve diff: two runs' logged values of one tag, at the steps both logged.

Used by the curve check and the DDP equivalence (max ``|run - base|``) and by the PNG (the
branch - baseline panel). A curve is ``(steps, values)`` as :func:`.load.read_curves` returns it.
"""

from __future__ import annotations

from .load import ComparisonError, Run


def curve_diff(
    run: Run, base: Run, tag: str, same_steps: bool = False
) -> tuple[list[int], list[float]]:
    """``(steps, run - base)`` of curve ``tag`` at the steps both runs logged, in ``run``'s order.

    ``same_steps``: both runs must have logged ``tag`` at exactly the same steps (the DDP
    equivalence: one process and two log at the same steps, or the runs are not comparable).
    Raises :class:`ComparisonError` when a run has no such curve or no step is in common.
    """
    for r in (run, base):
        if tag not in r.curves:
            raise ComparisonError(f"{r.dir}: no {tag!r} curve logged")
    steps, values = run.curves[tag]
    base_at = dict(zip(*base.curves[tag], strict=True))
    if same_steps and set(steps) != base_at.keys():
        raise ComparisonError(
            f"{tag}: logged at different steps ({sorted(steps)} vs {sorted(base_at)})"
        )
    pairs = [(s, v - base_at[s]) for s, v in zip(steps, values, strict=True) if s in base_at]
    return [s for s, _ in pairs], [d for _, d in pairs]


def max_curve_delta(run: Run, base: Run, tag: str, same_steps: bool = False) -> tuple[float, int]:
    """``(max |run - base|, number of common steps)`` of curve ``tag`` (see :func:`curve_diff`)."""
    steps, deltas = curve_diff(run, base, tag, same_steps)
    if not steps:
        raise ComparisonError(f"{run.dir}: no step of {tag!r} in common with {base.dir}")
    return max(abs(d) for d in deltas), len(steps)
