"""Shared fixtures: the device the kernels run on, seeds, and the float64 oracle; no downloads."""

from __future__ import annotations

import os
import sys

# Hugging Face models are built from configs (experiment/ and integrations/ tests): nothing may be
# downloaded. Set before transformers is imported anywhere, so a stray hub call fails at once
# instead of waiting.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest  # noqa: E402
import torch

import rmsnorm_kernel as rk

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (compiled Triton kernels)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture
def device() -> str:
    """Where the kernels run: the GPU when compiled, the CPU through the interpreter."""
    return "cuda" if rk.BACKEND == "cuda" else "cpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    rk.reset_calls()


@pytest.fixture(autouse=True)
def _inductor_pass_restored():
    """``patch(model)`` installs ``rmsnorm_kernel.inductor_fusion``'s pass in Inductor's global
    config by default: put back what was there, so one test's patch does not reach another's
    compiles."""
    config = sys.modules.get("torch._inductor.config")
    before = None if config is None else config.post_grad_custom_post_pass
    yield
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        config.post_grad_custom_post_pass = before


@pytest.fixture
def fresh_inductor():
    """For tests of ``rmsnorm_kernel.inductor_fusion``: Dynamo reset, Inductor's post-grad custom
    pass unset (restored afterwards), and no compile caches, so every graph is compiled, and
    rewritten, here (a cache hit would skip the pass and its counts)."""
    import torch._functorch.config as functorch_config
    from torch._inductor import config as inductor_config

    torch._dynamo.reset()
    with (
        inductor_config.patch(
            fx_graph_cache=False, fx_graph_remote_cache=False, post_grad_custom_post_pass=None
        ),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        yield
    torch._dynamo.reset()
