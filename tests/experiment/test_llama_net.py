"""The ``llama`` builder: every norm branch from one plain spec, same start, same numbers."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import rmsnorm_kernel as rk
from rmsnorm_kernel.experiment.core.builders import SpecError, build_from_spec, check_spec
from rmsnorm_kernel.experiment.lm import net as lm  # registers the "llama" builder
from rmsnorm_kernel.integrations.transformers import is_patched

SPEC = {
    "builder": "llama",
    "vocab_size": 32,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 16,
    "eps": 1e-6,
    "norm": "hf",
}
NORMS = 2 * SPEC["num_hidden_layers"] + 1


def build(norm: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_from_spec({**SPEC, "norm": norm})


def norm_classes(net) -> list[str]:
    """The norms' class names, ``patched:`` before those ``patch`` changed."""
    return [
        ("patched:" if is_patched(m) else "") + type(m).__name__
        for m in net.modules()
        if "RMSNorm" in type(m).__name__
    ]


def test_branches_start_from_the_same_weights_and_compute_the_same_logits(device):
    nets = {norm: build(norm).to(device) for norm in ("hf", "triton", "triton_fused", "torch")}
    assert norm_classes(nets["hf"]) == ["LlamaRMSNorm"] * NORMS
    assert norm_classes(nets["triton"]) == ["patched:LlamaRMSNorm"] * NORMS
    assert norm_classes(nets["triton_fused"]) == ["patched:LlamaRMSNorm"] * NORMS
    fused = [(type(m).__name__, is_patched(m)) for m in nets["triton_fused"].lm.model.layers]
    assert fused == [("LlamaDecoderLayer", True)] * SPEC["num_hidden_layers"]
    assert norm_classes(nets["torch"]) == ["RMSNorm"] * NORMS
    keys = list(nets["hf"].state_dict())
    for net in nets.values():
        assert list(net.state_dict()) == keys
        for k, v in net.state_dict().items():
            assert torch.equal(v, nets["hf"].state_dict()[k]), k
    ids = torch.randint(SPEC["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    with torch.no_grad():
        ref = nets["hf"](ids)
        assert ref.shape == (2, 16, SPEC["vocab_size"])
        rk.reset_calls()
        triton = nets["triton"](ids)
        assert rk.CALLS["forward"] == NORMS
        torch.testing.assert_close(triton, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(nets["triton_fused"](ids), ref, atol=1e-5, rtol=1e-5)
        assert rk.CALLS["forward"] == 2 * NORMS
        torch.testing.assert_close(nets["torch"](ids), ref, atol=1e-5, rtol=1e-5)


def test_spec_is_plain_data_checked_before_building():
    builder, args = check_spec(SPEC)
    assert builder is lm.build_llama and args["norm"] == "hf"
    with pytest.raises(SpecError, match="unknown norm 'nope'"):
        check_spec({**SPEC, "norm": "nope"})
    with pytest.raises(SpecError, match="net.hidden_size: must be an integer >= 1"):
        build_from_spec({**SPEC, "hidden_size": 0})
    with pytest.raises(SpecError, match="multiple of num_attention_heads"):
        build_from_spec({**SPEC, "hidden_size": 30})
    with pytest.raises(SpecError, match="attn_implementation"):
        build_from_spec({**SPEC, "attn_implementation": "flash"})


@pytest.mark.skipif(
    importlib.util.find_spec("liger_kernel") is not None,
    reason="liger-kernel is installed here: the branch builds (GPU runs cover it)",
)
def test_liger_without_the_package_is_a_clear_error():
    with pytest.raises(SpecError, match="norm=liger needs the liger-kernel package"):
        build("liger")
