"""Which operations materialise a lazily cloned (copy-on-write) CUDA tensor? (GPU probe)

Each row: a fresh ``torch._lazy_clone`` of a CUDA tensor, one operation on the clone, then
whether the clone is still COW. Then the package's own launches, cached and first-time, and the
torch.func ``jacfwd`` of ``F.rms_norm`` under ``torch.compile(fullgraph=True)`` (the reference
the package's compiled transform test compares against). Prints one line per row.

    PYTHONPATH=src python3 experiments/kernel_perf/cow_probe.py
"""

from __future__ import annotations

import traceback

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

is_cow = torch._C._is_cow_tensor


@triton.jit
def _copy(X, Y, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, tl.load(X + i))


def row(name, op):
    base = torch.randn(64, device="cuda")
    lazy = torch._lazy_clone(base)
    try:
        op(lazy)
        torch.cuda.synchronize()
        print(f"{name:48s} still COW: {is_cow(lazy)}")
    except Exception as e:  # noqa: BLE001 - a probe: print and go on
        print(f"{name:48s} raised {type(e).__name__}: {str(e)[:120]}")


def main():
    print("torch", torch.__version__, "triton", triton.__version__)
    row("nothing", lambda t: None)
    row("const_data_ptr()", lambda t: t.const_data_ptr())
    row("data_ptr()", lambda t: t.data_ptr())
    row("clone()", lambda t: t.clone())
    row("as_strided((64,),(1,),0).clone()", lambda t: t.as_strided((64,), (1,), 0).clone())
    row("empty_like().copy_(t)", lambda t: torch.empty_like(t).copy_(t))
    row("t + 0", lambda t: t + 0)
    row("t.sum()", lambda t: t.sum())
    row("t.to(float64)", lambda t: t.to(torch.float64))
    row("t.view(8, 8)", lambda t: t.view(8, 8))
    row("triton kernel given the tensor", lambda t: _copy[(1,)](t, torch.empty_like(t), 64))
    row("untyped_storage()", lambda t: t.untyped_storage())
    from rmsnorm_kernel import launch

    row("launch._snapshot(t)", launch._snapshot)
    row("launch.without_cow((t,))", lambda t: launch.without_cow((t,)))

    import rmsnorm_kernel as rk
    from rmsnorm_kernel import ops

    w = torch.randn(64, device="cuda")
    x0 = torch.randn(8, 64, device="cuda")
    ops.launch_forward(x0, w, None, 1e-6, 0.0, x0.dtype)  # compiles this key

    def fwd(t):
        ops.launch_forward(t.view(1, 64), w, None, 1e-6, 0.0, t.dtype)

    row("ops.launch_forward (1 row, maybe new key)", fwd)
    row("ops.launch_forward again (cached key)", fwd)
    row("rk.rmsnorm(t, w)", lambda t: rk.rmsnorm(t.view(1, 64), w, 1e-6))

    _compiled("F.rms_norm", lambda a, b: F.rms_norm(a, (24,), b, 1e-6))
    _compiled("rk.rmsnorm", lambda a, b: rk.rmsnorm(a, b, 1e-6))


def _compiled(name, f):
    """torch.compile(fullgraph) of jacfwd of ``f``, and grad of a compiled ``f``."""
    x = torch.randn(24, device="cuda")
    g = torch.randn(24, device="cuda")
    torch._dynamo.reset()
    try:
        jac = torch.compile(lambda a, b: torch.func.jacfwd(f, (0, 1))(a, b), fullgraph=True)
        out = jac(x, g)
        print(f"compiled jacfwd of {name}: ok, {[tuple(o.shape) for o in out]}")
    except Exception as e:  # noqa: BLE001
        print(f"compiled jacfwd of {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    torch._dynamo.reset()
    try:
        c = torch.compile(lambda a: f(a, g))
        torch.func.grad(lambda a: c(a).sum())(x)
        print(f"grad of compiled {name}: ok")
    except Exception as e:  # noqa: BLE001
        print(f"grad of compiled {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        traceback.print_exc(limit=-3)


if __name__ == "__main__":
    main()
