"""Choose how the Triton kernels run: compiled on a CUDA GPU, or through Triton's interpreter.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, so this module must run
before :mod:`rmsnorm_kernel.kernels` is imported; the package ``__init__`` imports it first.

Rules, in order:
1. An explicit user setting of ``TRITON_INTERPRET`` wins ("1" interprets, anything else compiles).
2. Without CUDA, the package sets ``TRITON_INTERPRET=1``: the *real* kernels run on the CPU.
3. Otherwise the kernels are compiled for the GPU.

There is never a silent fallback to the PyTorch reference: the choice is logged once and exposed
as :data:`BACKEND` ("interpreter" or "cuda").
"""

from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger("rmsnorm_kernel")

_ENV = "TRITON_INTERPRET"


def _choose() -> tuple[str, str]:
    """Return ``(backend, reason)`` and set ``TRITON_INTERPRET`` when CUDA is absent."""
    if _ENV in os.environ:
        interpret = os.environ[_ENV].strip() == "1"
        backend = "interpreter" if interpret else "cuda"
        return backend, f"{_ENV}={os.environ[_ENV]!r} set by the user"
    if torch.cuda.is_available():
        return "cuda", "CUDA is available: kernels are compiled by Triton"
    os.environ[_ENV] = "1"
    return (
        "interpreter",
        f"CUDA is not available: set {_ENV}=1, kernels run in Triton's interpreter",
    )


BACKEND, REASON = _choose()
logger.info("rmsnorm_kernel backend: %s (%s)", BACKEND, REASON)


def kernel_device() -> torch.device:
    """Where the kernels run: ``cuda`` when compiled, ``cpu`` when interpreted."""
    return torch.device("cpu") if BACKEND == "interpreter" else torch.device("cuda")
