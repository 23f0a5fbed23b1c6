"""``patch`` never leaves a model that fails later (issue 15, item 11).

- An eps the kernel refuses (``rms_norm_eps=0``, NaN, inf, too large for float32) is refused by
  ``patch``, naming the module's path in the model, before anything changes.
- A patched model pickles: ``torch.save``/``torch.load`` (also in a fresh process, where the
  kernel classes do not exist yet), ``pickle`` and ``copy.deepcopy``.
- T5's ``T5LayerNorm`` is an RMSNorm under another name: patched with T5's exact rule (per-dtype
  checks in test_transformers_rules.py), and a tiny T5 model matches its unpatched self.
- Modules that look like an RMSNorm (their forward calls ``rsqrt``) but are left as they are,
  are logged by name.

Tolerances are those of test_transformers_patch.py (float32 arithmetic order only).
"""

from __future__ import annotations

import copy
import io
import logging
import os
import pickle
import subprocess
import sys

import pytest
import torch
import transformers as hf
from hf_models import logits_and_grads, tiny_model, tokens
from torch import nn

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations.transformers import (
    UnsupportedNormError,
    is_patched,
    patch,
    unpatch,
)

LOGITS_TOL = {"atol": 1e-5, "rtol": 1e-5}
GRAD_TOL = {"atol": 1e-5, "rtol": 1e-4}


def kernel_modules(model) -> dict[str, str]:
    """``{path: class name}`` of the modules running a kernel subclass."""
    return {n: type(m).__name__ for n, m in model.named_modules() if is_patched(m)}


# --- eps refused at patch time ---------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_zero_eps_is_refused_at_patch_time_naming_the_module(family):
    model = tiny_model(family)
    for module in model.modules():  # as rms_norm_eps=0.0 in the config makes them
        for attr in ("variance_epsilon", "eps"):
            if "RMSNorm" in type(module).__name__ and hasattr(module, attr):
                setattr(module, attr, 0.0)
    with pytest.raises(
        UnsupportedNormError,
        match=r"at 'model\.layers\.0\.input_layernorm': (variance_epsilon|eps) must be a finite "
        r"real > 0 that fits in float32, as the kernel requires \(got 0\.0",
    ):
        patch(model)
    assert kernel_modules(model) == {}  # nothing changed


def test_zero_eps_from_the_config_is_refused():
    config = hf.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=64,
        rms_norm_eps=0.0,
    )
    model = hf.LlamaForCausalLM(config)
    with pytest.raises(UnsupportedNormError, match=r"LlamaRMSNorm at 'model\.layers\.0\."):
        patch(model)
    assert kernel_modules(model) == {}


@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan"), float("inf"), 1e39, 1e-50, 1e-39])
def test_every_eps_the_kernel_refuses_is_refused_at_patch_time(eps):
    norm = hf.models.t5.modeling_t5.T5LayerNorm(8, eps=eps)
    with pytest.raises(UnsupportedNormError, match="variance_epsilon must be a finite real > 0"):
        patch(norm)
    assert type(norm).__name__ == "T5LayerNorm"


# --- pickling ---------------------------------------------------------------------------------


@pytest.fixture
def patched_llama(device):
    """A tiny Llama with fused decoder layers too (both kinds of kernel subclass), its ids and
    its patched logits."""
    model = tiny_model("llama").to(device)
    ids = tokens().to(device)
    assert patch(model, fuse_residual=True) == 5 + 2  # 5 norms + 2 decoder layers
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return model, ids, logits


def assert_same_patched_model(loaded, model, ids, logits):
    assert kernel_modules(loaded) == kernel_modules(model)
    for (name, p), (_, q) in zip(loaded.named_parameters(), model.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=0, rtol=0, msg=name)
    rk.reset_calls()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, logits, atol=0, rtol=0)
    assert rk.CALLS["forward"] == 5  # every norm still runs the kernel
    assert unpatch(loaded) == 7


def test_torch_save_and_load_round_trip(patched_llama):
    model, ids, logits = patched_llama
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert_same_patched_model(loaded, model, ids, logits)


def test_pickle_and_deepcopy(patched_llama):
    model, ids, logits = patched_llama
    for loaded in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert loaded is not model
        assert_same_patched_model(loaded, model, ids, logits)
    assert len(kernel_modules(model)) == 7  # the original is still patched


def test_torch_load_in_a_fresh_process(patched_llama, tmp_path):
    """The loading process has never called ``patch``: the kernel classes are made on load."""
    model, ids, logits = patched_llama
    torch.save({"model": model, "ids": ids, "logits": logits}, tmp_path / "model.pt")
    code = (
        "import sys, torch, rmsnorm_kernel as rk\n"
        "saved = torch.load(sys.argv[1], weights_only=False)\n"
        "model = saved['model']\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(model(input_ids=saved['ids']).logits, saved['logits'],"
        " atol=0, rtol=0)\n"
        "from rmsnorm_kernel.integrations.transformers import is_patched\n"
        "norm = model.model.norm\n"
        "print('OK', rk.CALLS['forward'], type(norm).__qualname__, is_patched(norm))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "model.pt")],
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "OK 5 LlamaRMSNorm True" in out.stdout


# --- T5 ---------------------------------------------------------------------------------------


def tiny_t5(seed: int = 0) -> nn.Module:
    config = hf.T5Config(
        d_model=64,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        d_kv=16,
        vocab_size=128,
        dropout_rate=0.0,
        layer_norm_epsilon=1e-6,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    model = hf.T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__ == "T5LayerNorm":
                module.weight.normal_(1.0, 0.3)  # not all ones: a misplaced weight shows
    return model


def test_t5_model_is_patched_and_matches_unpatched(device):
    model = tiny_t5().to(device)
    ids = tokens().to(device)
    norms = [n for n, m in model.named_modules() if type(m).__name__ == "T5LayerNorm"]
    assert len(norms) == (2 * 2 + 1) + (2 * 3 + 1)  # 2 encoder blocks of 2, 2 decoder of 3, finals
    ref_logits, ref_grads = logits_and_grads(model, ids)

    assert patch(model) == len(norms)
    assert sorted(kernel_modules(model)) == sorted(norms)
    assert set(kernel_modules(model).values()) == {"T5LayerNorm"}

    rk.reset_calls()
    logits, grads = logits_and_grads(model, ids)
    assert rk.CALLS == {"forward": len(norms), "backward": len(norms)}
    torch.testing.assert_close(logits, ref_logits, **LOGITS_TOL)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], **GRAD_TOL, msg=lambda m, n=name: n + m)
    assert unpatch(model) == len(norms)
    assert kernel_modules(model) == {}


# --- RMSNorm-like modules left unpatched are logged --------------------------------------------


class ScaledNorm(nn.Module):
    """RMSNorm math under another name and rule: not patched, but worth a log line."""

    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return self.scale * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_rmsnorm_like_modules_left_unpatched_are_logged(caplog):
    model = nn.Sequential(hf.models.llama.modeling_llama.LlamaRMSNorm(8), ScaledNorm(8))
    with caplog.at_level(logging.WARNING, logger="rmsnorm_kernel"):
        assert patch(model) == 1
    assert "patch left 1 module(s) unpatched: ScaledNorm at '1' (RMSNorm-like" in caplog.text
    assert type(model[1]) is ScaledNorm


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_no_log_when_every_norm_is_patched(family, caplog):
    with caplog.at_level(logging.WARNING, logger="rmsnorm_kernel"):
        assert patch(tiny_model(family)) > 0
    assert "unpatched" not in caplog.text
