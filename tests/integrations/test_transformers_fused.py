"""``patch(model, fuse_residual=True)``: the post-attention add and norm in one kernel pass.

Tolerances as in test_transformers_patch (fixed before the first run): float32 logits to 1e-5,
every gradient to 1e-5 + 1e-4 relative, against the unpatched model. The sum ``residual + x`` is
one IEEE addition whichever side computes it, so it must be bitwise equal.
"""

from __future__ import annotations

import pytest
import torch
from hf_models import logits_and_grads, tiny_model, tokens
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations.fused_residual import add_norm
from rmsnorm_kernel.integrations.transformers import (
    UnsupportedNormError,
    is_patched,
    patch,
    unpatch,
)

LOGITS_TOL = {"atol": 1e-5, "rtol": 1e-5}
GRAD_TOL = {"atol": 1e-5, "rtol": 1e-4}
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def layers(model) -> list[torch.nn.Module]:
    return list(model.model.layers)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3", "gemma"])
def test_fused_model_matches_unpatched(family, device):
    model = tiny_model(family).to(device)
    ids = tokens().to(device)
    ref_logits, ref_grads = logits_and_grads(model, ids)
    norms = sum("RMSNorm" in type(m).__name__ for m in model.modules())
    decoder_classes = [type(layer) for layer in layers(model)]

    assert patch(model, fuse_residual=True) == norms + len(decoder_classes)
    assert all(is_patched(layer) for layer in layers(model))
    # The class keeps its name: code that finds layers by it (accelerate's _no_split_modules,
    # the Trainer's fsdp_transformer_layer_cls_to_wrap) still does.
    assert [type(layer).__name__ for layer in layers(model)] == [
        c.__name__ for c in decoder_classes
    ]
    rk.reset_calls()
    logits, grads = logits_and_grads(model, ids)
    # The fused call replaces the post-attention norm's: still one call per norm.
    assert rk.CALLS == {"forward": norms, "backward": norms}
    torch.testing.assert_close(logits, ref_logits, **LOGITS_TOL)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], **GRAD_TOL, msg=lambda m, n=name: n + m)

    assert unpatch(model) == norms + len(decoder_classes)
    assert [type(layer) for layer in layers(model)] == decoder_classes


@pytest.mark.parametrize("family", ["phi3", "gemma2"])
def test_other_decoder_layers_are_refused_or_left_unfused(family):
    model = tiny_model(family)
    name = type(layers(model)[0]).__name__
    with pytest.raises(UnsupportedNormError, match=rf"fuse_residual: .*{name} at 'model.layers.0'"):
        patch(model, fuse_residual=True)
    assert not any(is_patched(m) for m in model.modules())
    norms = sum("RMSNorm" in type(m).__name__ for m in model.modules())
    assert patch(model, fuse_residual=True, allow_unknown=True) == norms
    assert type(layers(model)[0]).__name__ == name


@pytest.mark.parametrize("norm_cls, centre", [(LlamaRMSNorm, 1.0), (GemmaRMSNorm, 0.0)])
@pytest.mark.parametrize(
    "x_dtype, res_dtype, w_dtype",
    [
        (F16, F16, F16),  # half model: sum rounded to fp16, then the norm's rounding rule
        (F16, F32, F32),  # autocast: half attention output onto the fp32 residual stream
        (F32, F32, F32),
        pytest.param(BF16, BF16, BF16, marks=pytest.mark.gpu),
        pytest.param(BF16, F32, F32, marks=pytest.mark.gpu),
    ],
)
def test_add_norm_follows_the_layers_rule(norm_cls, centre, x_dtype, res_dtype, w_dtype, device):
    torch.manual_seed(0)
    norm = norm_cls(64, eps=1e-6).to(device=device, dtype=w_dtype)
    with torch.no_grad():
        norm.weight.normal_(centre, 0.5)
    x = (torch.randn(256, 64, device=device) * 3).to(x_dtype)
    residual = (torch.randn(256, 64, device=device) * 3).to(res_dtype)
    with torch.no_grad():
        h_ref = residual + x
        y_ref = norm(h_ref)
        patch(norm)
        y, h = add_norm(norm, x, residual)
    assert torch.equal(h, h_ref) and h.dtype == h_ref.dtype
    assert y.dtype == y_ref.dtype
    if h.dtype == F32:
        torch.testing.assert_close(y, y_ref, atol=1e-6, rtol=2 * 2**-23)
    else:
        exact = (y == y_ref).float().mean().item()
        assert exact >= 0.99, f"only {exact:.4f} of the outputs are bitwise equal"
        ulp = {F16: 2**-10, BF16: 2**-7}[h.dtype]
        torch.testing.assert_close(y, y_ref, atol=0, rtol=ulp)


@pytest.mark.parametrize("norm_cls, centre", [(LlamaRMSNorm, 1.0), (GemmaRMSNorm, 0.0)])
def test_add_norm_gradients_on_the_float32_stream(norm_cls, centre, device):
    """Autocast's pair (a half block output onto the float32 residual stream) goes into the
    kernel as it is, without an upcast copy: the gradients still match the layer's own add and
    norm, each in its input's dtype."""
    torch.manual_seed(0)
    norm = norm_cls(64, eps=1e-6).to(device=device)
    with torch.no_grad():
        norm.weight.normal_(centre, 0.5)
    x = (torch.randn(32, 64, device=device) * 3).to(F16).requires_grad_()
    residual = (torch.randn(32, 64, device=device) * 3).requires_grad_()
    dy, dh = torch.randn(32, 64, device=device), torch.randn(32, 64, device=device)
    h_ref = residual + x
    torch.autograd.backward([norm(h_ref), h_ref], [dy, dh])
    want = [t.grad.clone() for t in (x, residual, norm.weight)]
    for t in (x, residual, norm.weight):
        t.grad = None
    patch(norm)
    y, h = add_norm(norm, x, residual)
    torch.autograd.backward([y, h], [dy, dh])
    got = [x.grad, residual.grad, norm.weight.grad]
    for g, w, what in zip(got, want, ("x", "residual", "weight"), strict=True):
        assert g.dtype == w.dtype, what
        tol = {"atol": 1e-3, "rtol": 1e-3} if g.dtype == F16 else {"atol": 1e-4, "rtol": 1e-4}
        torch.testing.assert_close(g, w, **tol, msg=lambda m, n=what: f"d{n}: {m}")


def _zero_output(module, args, output):
    return output * 0


def test_a_hook_on_the_fused_norm_runs_and_changes_the_output_as_unpatched(device):
    """A forward hook on ``post_attention_layernorm`` (activation capture, steering) used to be
    skipped by the fused pass, silently changing the logits; the layer now calls the norm module
    as the original does, warning once, and matches the unpatched model with the same hook."""
    ref = tiny_model("llama").to(device)
    model = tiny_model("llama").to(device)
    patch(model, fuse_residual=True)
    ids = tokens().to(device)
    seen = []
    for m in (ref, model):
        norm = m.model.layers[0].post_attention_layernorm
        norm.register_forward_hook(lambda mod, a, o: seen.append(mod) or _zero_output(mod, a, o))
    want = ref(input_ids=ids).logits
    with pytest.warns(UserWarning, match="called unfused.*a module hook would see its call"):
        got = model(input_ids=ids).logits
    assert len(seen) == 2 and seen[1] is model.model.layers[0].post_attention_layernorm
    torch.testing.assert_close(got, want, **LOGITS_TOL)


def test_a_global_module_hook_also_unfuses(device):
    model = tiny_model("llama").to(device)
    patch(model, fuse_residual=True)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda mod, a, o: seen.append(type(mod).__name__)
    )
    try:
        with pytest.warns(UserWarning, match="a module hook would see its call"):
            model(input_ids=tokens().to(device))
    finally:
        handle.remove()
    assert seen.count("LlamaRMSNorm") == 2 * 2 + 1  # both norms of both layers, and the last


@pytest.mark.parametrize("how", ["unpatch", "replace", "identity"])
def test_a_norm_unpatched_or_replaced_after_fusing_runs_as_in_the_original_layer(how, device):
    """``unpatch(layer.post_attention_layernorm)`` or a new module in its place (an ablation)
    used to fail at the next forward with an AttributeError naming neither the layer nor
    fuse_residual; the layer now calls that module as the original does."""
    ref = tiny_model("llama").to(device)
    model = tiny_model("llama").to(device)
    patch(model, fuse_residual=True)
    layer = model.model.layers[1]
    if how == "unpatch":
        assert unpatch(layer.post_attention_layernorm) == 1
    else:
        for m in (ref, model):
            new = torch.nn.Identity() if how == "identity" else LlamaRMSNorm(64, eps=1e-2)
            m.model.layers[1].post_attention_layernorm = new.to(device)
    ids = tokens().to(device)
    with pytest.warns(UserWarning, match="not a norm patched with the llama or gemma rule"):
        got = model(input_ids=ids).logits
    torch.testing.assert_close(got, ref(input_ids=ids).logits, **LOGITS_TOL)
    assert is_patched(layer)


def test_a_fused_layer_takes_its_arguments_by_position_as_the_original(device):
    ref = tiny_model("llama").to(device)
    model = tiny_model("llama").to(device)
    patch(model, fuse_residual=True)
    h = torch.randn(2, 8, 64, device=device)
    pos = torch.arange(8, device=device)[None].expand(2, 8)
    pe = model.model.rotary_emb(h, pos)
    want = ref.model.layers[0](h, None, pos, position_embeddings=pe)
    torch.testing.assert_close(
        model.model.layers[0](h, None, pos, position_embeddings=pe), want, **LOGITS_TOL
    )
    layer = model.model.layers[0]
    with pytest.raises(TypeError, match="got multiple values for argument 'attention_mask'"):
        layer(h, None, attention_mask=None, position_embeddings=pe)
    with pytest.raises(TypeError, match="positional arguments after self"):
        layer(h, *([None] * 20))


@pytest.mark.parametrize("fuse", [False, True])
def test_an_eps_set_after_patch_is_checked_naming_the_module(fuse, device):
    """A patched norm reads eps at each call: an invalid one set after ``patch`` is refused
    naming the class and attribute (it used to say only "eps must be > 0"), and None is refused
    as the original's arithmetic refuses it (the kernels read None as nn.RMSNorm's default)."""
    model = tiny_model("llama").to(device)
    patch(model, fuse_residual=fuse)
    norm = model.model.layers[1].post_attention_layernorm
    ids = tokens().to(device)
    norm.variance_epsilon = 0.0
    with pytest.raises(ValueError, match=r"LlamaRMSNorm \(patched by rmsnorm_kernel; eps 0.0 "):
        model(input_ids=ids)
    norm.variance_epsilon = None
    with pytest.raises(TypeError, match="LlamaRMSNorm.variance_epsilon is None"):
        model(input_ids=ids)
    gemma = tiny_model("gemma").to(device)
    patch(gemma, fuse_residual=fuse)
    gemma.model.layers[0].post_attention_layernorm.eps = float("nan")
    with pytest.raises(ValueError, match=r"GemmaRMSNorm \(patched .*eps nan from \.eps\)"):
        gemma(input_ids=ids)
