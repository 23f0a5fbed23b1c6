"""Host cost A/B in one process: another copy of the package (``--old``: a folder holding
``rmsnorm_kernel/``, e.g. an earlier commit's) beside the working tree's, rows interleaved round
by round. Separate processes on the device VM differ by up to 20% in every row (F.rms_norm's
included), more than a host-side change moves, so only a same-process comparison can tell.

    git archive HEAD src/rmsnorm_kernel | tar -x -C /tmp/old
    PYTHONPATH=src python3 experiments/kernel_perf/host_ab.py --old /tmp/old/src

The copy is imported as ``rmsnorm_kernel_old`` with its ``torch.library`` namespace renamed the
same way (two packages cannot register one op). Rows, at 128 x 257 float32 (the bench's host
shape): ``ours`` (``rmsnorm`` + ``autograd.grad``) and ``launchers`` (``ops.launch_forward`` +
``ops.launch_backward``, no autograd) and ``inference`` (``rmsnorm`` on tensors that need no
grad) of each copy, and ``F.rms_norm`` + ``autograd.grad`` and without grad.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from host_split import EPS, interleaved  # noqa: E402

ROUNDS = 9


def import_copy(src: str):
    """``src/rmsnorm_kernel`` imported as ``rmsnorm_kernel_old`` (a renamed copy)."""
    tmp = pathlib.Path(tempfile.mkdtemp())
    dst = tmp / "rmsnorm_kernel_old"
    shutil.copytree(pathlib.Path(src) / "rmsnorm_kernel", dst)
    for py in dst.rglob("*.py"):
        text = py.read_text()
        text = text.replace("rmsnorm_kernel::", "rmsnorm_kernel_old::")
        text = text.replace("torch.ops.rmsnorm_kernel.", "torch.ops.rmsnorm_kernel_old.")
        py.write_text(text)
    sys.path.insert(0, str(tmp))
    import rmsnorm_kernel_old

    return rmsnorm_kernel_old


def rows_of(pkg, tag: str, x, w, dy) -> dict:
    xd, wd = x.detach(), w.detach()
    _, _, rstd = pkg.ops.launch_forward(xd, wd, None, EPS, 0.0, x.dtype)

    def ours():
        torch.autograd.grad(pkg.rmsnorm(x, w, EPS), (x, w), dy)

    def launchers():
        pkg.ops.launch_forward(xd, wd, None, EPS, 0.0, x.dtype)
        pkg.ops.launch_backward(dy, xd, wd, rstd, 0.0, None, x.dtype)

    def inference():  # nothing requires grad: the inference path (no autograd node)
        pkg.rmsnorm(xd, wd, EPS)

    return {f"ours ({tag})": ours, f"launchers ({tag})": launchers, f"inference ({tag})": inference}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", required=True, help="a folder holding rmsnorm_kernel/")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    import rmsnorm_kernel as new

    old = import_copy(args.old)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    calls = args.calls if device == "cuda" else 4  # the interpreter: a smoke test only
    torch.manual_seed(0)
    x = torch.randn(128, 257, device=device, requires_grad=True)
    w = torch.ones(257, device=device, requires_grad=True)
    dy = torch.randn(128, 257, device=device)
    calls_of = rows_of(old, "old", x, w, dy) | rows_of(new, "new", x, w, dy)
    calls_of["F.rms_norm fwd+bwd"] = lambda: torch.autograd.grad(
        F.rms_norm(x, (257,), w, EPS), (x, w), dy
    )
    xd, wd = x.detach(), w.detach()
    calls_of["F.rms_norm inference"] = lambda: F.rms_norm(xd, (257,), wd, EPS)
    times = interleaved(calls_of, device, calls, args.rounds, "128x257 float32")
    for tag in ("old", "new"):
        ratios = [
            a / b
            for a, b in zip(times[f"inference ({tag})"], times["F.rms_norm inference"], strict=True)
        ]
        print(
            f"  inference ({tag}) / F.rms_norm inference per round, median "
            f"{statistics.median(ratios):.3f}"
        )
    for row in ("ours", "launchers", "inference"):
        # per-round ratios: each round times both copies back to back
        ratios = [a / b for a, b in zip(times[f"{row} (new)"], times[f"{row} (old)"], strict=True)]
        print(
            f"  {row}: new / old per round, median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=device, rounds=times), f, indent=1)


if __name__ == "__main__":
    main()
