"""`check-environment`: prove the machine runs the kernel, not just that a GPU is listed.

With CUDA: initialise it, launch the real kernels once (forward + backward, 17 x 257 fp32) and
compare with the reference. Without: say clearly that Triton's interpreter will be used, and still
run one interpreted launch.
"""

from __future__ import annotations

import torch


def run_check_environment(console=None) -> int:
    import triton
    from rich.console import Console

    import rmsnorm_kernel
    from rmsnorm_kernel.backend import BACKEND, REASON, kernel_device

    console = console or Console()
    console.print(
        f"python torch {torch.__version__}, triton {triton.__version__}, "
        f"CUDA available: {torch.cuda.is_available()}",
        highlight=False,
    )
    console.print(f"backend: {BACKEND} ({REASON})", highlight=False)
    if BACKEND == "cuda" and not torch.cuda.is_available():
        console.print(
            "[red]FAIL: TRITON_INTERPRET asks for compiled kernels, but torch sees no CUDA GPU "
            "here: unset TRITON_INTERPRET (or set it to 1) to run them in Triton's "
            "interpreter[/red]"
        )
        return 1
    if BACKEND == "cuda":
        torch.cuda.init()
        props = torch.cuda.get_device_properties(0)
        console.print(
            f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
            f"capability {props.major}.{props.minor}, CUDA {torch.version.cuda}",
            highlight=False,
        )
    else:
        console.print(
            "[yellow]No CUDA GPU: the kernels will run through Triton's interpreter on "
            "the CPU (TRITON_INTERPRET=1). Results are real kernel results; timings are "
            "not (benchmark refuses).[/yellow]"
        )
    device = kernel_device()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(17, 257, generator=g).to(device).requires_grad_()
    w = (1 + 0.5 * torch.randn(257, generator=g)).to(device).requires_grad_()
    dy = torch.randn(17, 257, generator=g).to(device)
    y = rmsnorm_kernel.rmsnorm(x, w, 1e-6)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    if device.type == "cuda":
        torch.cuda.synchronize()
    y_ref = rmsnorm_kernel.rmsnorm_reference(x, w, 1e-6)
    dx_ref, dw_ref = torch.autograd.grad(y_ref, (x, w), dy)
    errs = {
        "y": (y - y_ref).abs().max().item(),
        "dx": (dx - dx_ref).abs().max().item(),
        "dweight": (dw - dw_ref).abs().max().item(),
    }
    ok = all(
        torch.allclose(a, b, atol=1e-5, rtol=1e-4)
        for a, b in ((y, y_ref), (dx, dx_ref), (dw, dw_ref))
    )
    where = "on the GPU" if device.type == "cuda" else "in the interpreter"
    console.print(
        f"one launch {where} (17x257 fp32, forward + backward) vs reference: "
        + ", ".join(f"max|{k} err| {v:.2e}" for k, v in errs.items()),
        highlight=False,
    )
    console.print(
        "[green]environment OK[/green]"
        if ok
        else "[red]FAIL: the kernel disagrees with the reference[/red]"
    )
    return 0 if ok else 1
