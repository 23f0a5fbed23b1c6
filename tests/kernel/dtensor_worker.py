"""One rank of ``test_dtensor.py``: ``python dtensor_worker.py RANK WORLD INIT_FILE``.

CPU (gloo) with the interpreter, CUDA (nccl, one GPU per rank) when compiled. Every check raises
on failure, so the rank exits non-zero and the test shows its traceback."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

import rmsnorm_kernel as rk

TOL = dict(atol=1e-5, rtol=1e-5)  # float32 values of one formula, reduced in another order


def _close(a, b, what):
    torch.testing.assert_close(a, b, msg=lambda m: f"{what}: {m}", **TOL)


def _refused(fn, error, fragment):
    try:
        fn()
    except error as e:
        assert fragment in str(e), f"{fragment!r} not in {e}"
        return
    raise AssertionError(f"no {error.__name__} ({fragment})")


def main(rank: int, world: int, init_file: str) -> None:
    cuda = rk.BACKEND == "cuda"
    device = f"cuda:{rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    mesh = init_device_mesh("cuda" if cuda else "cpu", (world,))
    torch.manual_seed(0)  # the same global tensors on every rank
    x, w = torch.randn(2, 5, 16, device=device), torch.randn(16, device=device)
    dy, r = torch.randn(2, 5, 16, device=device), torch.randn(2, 5, 16, device=device)

    # Sharded over the sequence (5 rows over 2 ranks: 3 and 2), the batch, or replicated:
    # values, gradients and placements as F.rms_norm's on the same DTensors.
    for placement in (Shard(1), Shard(0), Replicate()):
        got = {}
        for name, fn in (("ours", rk.rms_norm), ("torch", F.rms_norm)):
            dx = distribute_tensor(x, mesh, [placement]).requires_grad_()
            dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
            y = fn(dx, (16,), dw, 1e-6)
            y.backward(distribute_tensor(dy, mesh, [placement]))
            got[name] = (y, dx.grad, dw.grad)
        for what, a, b in zip(("y", "dx", "dweight"), got["ours"], got["torch"], strict=True):
            assert tuple(a.placements) == tuple(b.placements), (what, a.placements, b.placements)
            _close(a.full_tensor(), b.full_tensor(), f"{placement} {what}")
        if isinstance(placement, Shard):
            assert isinstance(got["ours"][2].placements[0], Partial)

    # Two normalised dims (rms_norm flattens them on each rank), the batch sharded.
    dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
    dw = distribute_tensor(w[:5].repeat(16, 1).T.contiguous(), mesh, [Replicate()]).requires_grad_()
    y = rk.rms_norm(dx, (5, 16), dw, None)
    y.backward(distribute_tensor(dy, mesh, [Shard(0)]))
    px, pw = x.clone().requires_grad_(), dw.full_tensor().detach().requires_grad_()
    y_ref = F.rms_norm(px, (5, 16), pw, None)
    y_ref.backward(dy)
    for what, a, b in (("y", y, y_ref), ("dx", dx.grad, px.grad), ("dweight", dw.grad, pw.grad)):
        _close(a.full_tensor(), b, f"two normalised dims {what}")

    # The fused residual add and Llama's rounding: the plain call on the whole tensors.
    dx = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    dr = distribute_tensor(r, mesh, [Shard(1)]).requires_grad_()
    dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
    y, h = rk.rmsnorm(dx, dw, 1e-6, residual=dr, rounding="llama")
    (y * 2 + h).backward(distribute_tensor(dy, mesh, [Shard(1)]))
    px, pr, pw = (t.clone().requires_grad_() for t in (x, r, w))
    y_ref, h_ref = rk.rmsnorm(px, pw, 1e-6, residual=pr, rounding="llama")
    (y_ref * 2 + h_ref).backward(dy)
    pairs = ((y, y_ref), (h, h_ref), (dx.grad, px.grad), (dr.grad, pr.grad), (dw.grad, pw.grad))
    for what, (a, b) in zip(("y", "h", "dx", "dresidual", "dweight"), pairs, strict=True):
        _close(a.full_tensor(), b, f"residual llama {what}")

    # Liger's drop-in, as Liger-Kernel: X sharded over the hidden dim beside a plain W is
    # gathered (a plain y), a sharded dY is gathered too, and X's gradient is the plain one.
    from rmsnorm_kernel.integrations.liger import liger_rms_norm

    dx = distribute_tensor(x, mesh, [Shard(2)]).requires_grad_()
    lw, pw = (w.clone().requires_grad_() for _ in range(2))
    px = x.clone().requires_grad_()
    y = liger_rms_norm(dx, lw, 1e-6, offset=0.5, casting_mode="gemma")
    y_ref = liger_rms_norm(px, pw, 1e-6, offset=0.5, casting_mode="gemma")
    assert type(y) is torch.Tensor, type(y)
    y.backward(distribute_tensor(dy, mesh, [Shard(2)]))
    y_ref.backward(dy)
    for what, a, b in (("y", y, y_ref), ("dx", dx.grad, px.grad), ("dw", lw.grad, pw.grad)):
        assert type(a) is torch.Tensor, (what, type(a))
        _close(a, b, f"liger DTensor {what}")

    # Refused before any launch, naming the rule.
    calls = dict(rk.CALLS)
    sharded_n = distribute_tensor(x, mesh, [Shard(2)])
    rows = distribute_tensor(x, mesh, [Shard(1)])
    _refused(lambda: rk.rms_norm(sharded_n, (16,)), ValueError, "normalised dims")
    _refused(lambda: rk.rms_norm(rows, (5, 16)), ValueError, "normalised dims")
    sharded_w = distribute_tensor(w, mesh, [Shard(0)])
    _refused(lambda: rk.rmsnorm(rows, sharded_w), ValueError, "weight must be replicated")
    _refused(lambda: rk.rmsnorm(rows, w), TypeError, "all be DTensors")
    other = distribute_tensor(r, mesh, [Replicate()])
    _refused(lambda: rk.rmsnorm(rows, None, residual=other), ValueError, "x's placements")
    assert rk.CALLS == calls, (rk.CALLS, calls)
    dist.barrier()  # both ranks done before either tears its group down
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    # Every check has passed. Leave without running C++ static destructors: at interpreter exit
    # a gloo worker thread was sometimes still joinable, and its destructor aborted the rank
    # ("terminate called without an active exception", 4 of 8 runs on 2 CPU cores).
    sys.stdout.flush()
    os._exit(0)
