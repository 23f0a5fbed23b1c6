"""A planted wrong branch, for tests only: ``norm=planted_eps`` is the ``hf`` norm with eps x 100.

The comparison's criterion (``conf/compare/lm.yaml``) must fail it while passing the correct
branches. Nothing here is importable from ``src/``: the norm's config lives in
``tests/experiment/planted_conf/norm/`` (added to Hydra's search path by :data:`SEARCHPATH`) and
its builder is registered only inside :func:`planted_norm`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from torch import nn

from rmsnorm_kernel.experiment.core import builders

NAME = "planted_eps"
#: The planted error: eps multiplied by this.
EPS_FACTOR = 100.0
#: The override that puts ``planted_conf/`` on Hydra's search path (``norm=planted_eps``).
SEARCHPATH = f"hydra.searchpath=[file://{Path(__file__).parent / 'planted_conf'}]"


def _planted_eps(normalized_shape, eps: float = 1e-6) -> nn.Module:
    """``LlamaRMSNorm(N, eps * 100)``: right shape, right weight, wrong eps."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    (n,) = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return LlamaRMSNorm(n, eps=eps * EPS_FACTOR)


@contextlib.contextmanager
def planted_norm() -> Iterator[str]:
    """``norm=planted_eps`` buildable inside the block; removed from the allow-list after."""
    builders._load_providers()  # so a later lookup does not re-import over the removal
    builders.register_norm(NAME, _planted_eps)
    try:
        yield NAME
    finally:
        builders.NORMS.pop(NAME, None)
