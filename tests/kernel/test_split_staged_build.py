"""The staged split-row forward's build for sm_90 (H100 / H200), made here without a GPU by
Triton's own compiler (``experiments/kernel_perf/compile_check.py --staged``, in a subprocess:
compiled mode must be chosen before triton is imported). The interpreter cannot see what the
kernel relies on, which only the build shows:

- Triton's pipeliner took its loop (the chunk loads became cp.async into shared memory); a
  barrier or a nested loop in the loop body would silently turn that off;
- the partial's store and the release atomic are made by the same thread (the same predicate),
  so the release orders the store without the barrier the pipeliner refuses;
- the asm spin comes before the asm load of the partials, which comes before y's stores;
- shared memory is the ring the launcher's check counts (``config.check_forward_stages``), and
  nothing spills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_kernel.config import STAGES_SCRATCH_BYTES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report() -> list[dict]:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": path}
    script = ROOT / "experiments" / "kernel_perf" / "compile_check.py"
    done = subprocess.run(
        [sys.executable, str(script), "--staged"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(rows) == 8, rows
    return rows


def test_the_loop_is_pipelined(report):
    for row in report:
        assert row["async_copies"] >= 2, f"no cp.async ring: {row}"


def test_the_partial_and_its_release_come_from_one_thread(report):
    for row in report:
        assert row["same_thread"], f"store and release atomic predicated apart: {row}"


def test_the_partials_are_read_after_the_wait(report):
    for row in report:
        assert row["order"], f"spin, partials load and y's stores out of order: {row}"


def test_shared_memory_is_the_checked_ring_and_nothing_spills(report):
    for row in report:
        assert row["ring_bytes"] <= row["shared"] <= row["ring_bytes"] + STAGES_SCRATCH_BYTES, row
        assert row["stack"] == 0 and row["registers"] <= 255, row
