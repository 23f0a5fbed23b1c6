"""``patch(model)`` (its default ``inductor_fusion=True``) on a compiled Hugging Face Llama: the
pass finds the decoder layers' residual adds and gradient accumulations in HF's real graph, and
the compiled model still computes what the eager patched model does."""

from __future__ import annotations

import pytest
import torch
from hf_models import distinct_tokens, tiny_model, tokens
from torch._inductor import config as inductor_config

import rmsnorm_kernel as rk
from rmsnorm_kernel import inductor_dy_sums, inductor_fusion
from rmsnorm_kernel.integrations.transformers import is_patched, patch, unpatch


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=ids)
    out.loss.backward()
    return out.logits.detach(), {
        n.removeprefix("_orig_mod."): p.grad.clone()
        for n, p in model.named_parameters()
        if p.grad is not None
    }


def _assert_matches_eager(model, ids, logits, grads):
    """The compiled run's logits and parameter gradients against the eager patched model's."""
    eager_logits, eager_grads = _loss_and_grads(model, ids)
    tol = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(logits, eager_logits, **tol)
    for name, g in grads.items():
        torch.testing.assert_close(g, eager_grads[name], **tol, msg=lambda m, n=name: f"{n}: {m}")


def _assert_bitwise(run, ref):
    """Two ``_loss_and_grads`` results equal bit for bit; names every parameter that is not."""
    (logits, grads), (ref_logits, ref_grads) = run, ref
    torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0)
    assert grads.keys() == ref_grads.keys()
    differ = {
        name: (g - ref_grads[name]).abs().max().item()
        for name, g in grads.items()
        if not torch.equal(g, ref_grads[name])
    }
    assert not differ, f"gradients not bit for bit (max abs difference): {differ}"


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])  # gemma3: norms after blocks too
def test_compiled_model_folds_every_residual_add(device, fresh_inductor, family):
    model = tiny_model(family).to(device).train()
    layers = model.config.num_hidden_layers
    ids = tokens().to(device)
    before = dict(inductor_fusion.REWRITES)
    norms = patch(model)
    assert inductor_fusion.enabled()
    rk.reset_calls()
    logits, grads = _loss_and_grads(torch.compile(model), ids)
    assert rk.CALLS == {"forward": norms, "backward": norms}
    done = {k: inductor_fusion.REWRITES[k] - before[k] for k in before}
    # Of the norms on the residual stream (two per layer, and the final one; qwen3's per-head
    # q/k norms and gemma3's norms of block outputs are not), every one but the first reads a
    # residual sum, and every one but the last (its input has no other user) has its gradient
    # accumulated with the stream's. The two norms of each layer feed q / k / v and gate / up:
    # their dy is a sum of those projections' input gradients.
    assert done == {
        "forward_residual": 2 * layers,
        "backward_accumulate": 2 * layers,
        "forward_cast": 0,  # float32 throughout: no cast after a norm
        "backward_cast": 0,
        "backward_dy_sum": 2 * layers,
        "backward_dx_cast": 0,
        "backward_gemm_sum": 0,
    }
    _assert_matches_eager(model, ids, logits, grads)
    unpatch(model)


def test_patch_installs_the_pass_by_default(fresh_inductor):
    patch(tiny_model("llama"))
    assert inductor_fusion.enabled()
    inductor_fusion.disable()
    assert inductor_config.post_grad_custom_post_pass is None


def test_patch_leaves_inductor_alone_when_told(fresh_inductor):
    patch(tiny_model("llama"), inductor_fusion=False)
    assert inductor_config.post_grad_custom_post_pass is None


@pytest.mark.parametrize("switch", ["fuse_residual", "allow_unknown", "inductor_fusion"])
def test_patch_switches_must_be_booleans(switch, fresh_inductor):
    model = tiny_model("llama")
    with pytest.raises(TypeError, match=f"{switch} must be True or False"):
        patch(model, **{switch: "yes"})
    assert not any(is_patched(m) for m in model.modules()), "nothing changed"
    assert inductor_config.post_grad_custom_post_pass is None


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_gemm_sums_fold_the_projections_input_gradients(device, fresh_inductor, family):
    """``RMSNormFusionPass(gemm_sums=True)``: in every decoder layer the q / k / v projections'
    input gradients (two additions) and gate / up's (one) become addmm chains into the norms'
    dy; the compiled model still computes what the eager patched model does."""
    model = tiny_model(family).to(device).train()
    layers = model.config.num_hidden_layers
    ids = tokens().to(device)
    patch(model, inductor_fusion=False)
    before = dict(inductor_fusion.REWRITES)
    options = {"post_grad_custom_post_pass": inductor_fusion.RMSNormFusionPass(gemm_sums=True)}
    logits, grads = _loss_and_grads(torch.compile(model, options=options), ids)
    done = {k: inductor_fusion.REWRITES[k] - before[k] for k in before}
    assert done["backward_gemm_sum"] == 3 * layers, done
    assert done["backward_dy_sum"] == 0, done  # the sums went into the GEMMs first
    _assert_matches_eager(model, ids, logits, grads)
    unpatch(model)


def test_autocast_casts_go_into_the_kernels_without_changing_a_bit(
    device, fresh_inductor, monkeypatch
):
    """bf16-mixed training (float32 weights, bfloat16 autocast): every norm's float32 output is
    cast to bfloat16 for the next GEMMs, the final norm's gradient arrives as that cast's
    (widened) gradient, the other norms' as a float32 sum of widened bfloat16 GEMM outputs, and
    their float32 dx is cast to bfloat16 for the GEMMs before them. The pass stores the bfloat16
    output from the kernel, reads that gradient unwidened and the GEMM outputs themselves, and
    stores dx's bfloat16 copy from the backward kernel: the compiled model gives the same logits
    and gradients, bit for bit, as the same compile with those rewrites switched off. (Both
    keep the residual
    rewrites: the gradient accumulation is not bit for bit by design, one rounding where the
    graph has two; on the GPU the kernel's ``dx * r + g`` contracts into one FMA.)"""
    runs = {}
    for name in ("exact rewrites off", "pass"):
        torch._dynamo.reset()
        if name == "exact rewrites off":
            monkeypatch.setattr(inductor_fusion, "_fuse_forward_cast", lambda g, n: False)
            monkeypatch.setattr(inductor_fusion, "_fuse_backward_cast", lambda g, n: False)
            monkeypatch.setattr(inductor_fusion, "_fuse_backward_dx_cast", lambda g, n: False)
            monkeypatch.setattr(inductor_dy_sums, "dy_parts", lambda dy: None)
        else:
            monkeypatch.undo()
        model = tiny_model("llama").to(device).train()
        patch(model, inductor_fusion=False)
        before = dict(inductor_fusion.REWRITES)
        options = {"post_grad_custom_post_pass": inductor_fusion.RMSNormFusionPass()}
        with torch.autocast(device, dtype=torch.bfloat16):
            runs[name] = _loss_and_grads(
                torch.compile(model, options=options), distinct_tokens().to(device)
            )
        runs[name + " done"] = {k: inductor_fusion.REWRITES[k] - before[k] for k in before}
    layers = model.config.num_hidden_layers
    assert runs["pass done"]["forward_cast"] == 2 * layers + 1, runs["pass done"]
    assert runs["pass done"]["backward_cast"] == 1, runs["pass done"]  # the final norm's
    # the bfloat16 sums of the projections' input gradients, read by the kernel
    assert runs["pass done"]["backward_dy_sum"] == 2 * layers, runs["pass done"]
    # the residual stream's gradient cast to bfloat16 for the GEMMs before each norm but the first
    assert runs["pass done"]["backward_dx_cast"] == 2 * layers, runs["pass done"]
    off = runs["exact rewrites off done"]
    exact = ("forward_cast", "backward_cast", "backward_dy_sum", "backward_dx_cast")
    assert not any(off[kind] for kind in exact), off
    assert off["forward_residual"] == runs["pass done"]["forward_residual"] == 2 * layers
    _assert_bitwise(runs["pass"], runs["exact rewrites off"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_projection_gradient_sums_go_into_the_kernel_without_changing_a_bit(
    device, dtype, fresh_inductor, monkeypatch
):
    """A 16-bit model (as the shared probes train it): each norm's dy is the sum of the q / k / v
    (or gate / up) projections' input gradients, which Inductor adds in float32 and rounds once.
    The backward kernel reads the GEMM outputs and sums them the same way: logits and gradients
    equal, bit for bit, the same compile with that one rewrite switched off."""
    runs = {}
    for name in ("fold", "no fold"):
        torch._dynamo.reset()
        if name == "no fold":
            monkeypatch.setattr(inductor_dy_sums, "dy_parts", lambda dy: None)
        model = tiny_model("llama").to(device, dtype).train()
        patch(model, inductor_fusion=False)
        before = dict(inductor_fusion.REWRITES)
        options = {"post_grad_custom_post_pass": inductor_fusion.RMSNormFusionPass()}
        runs[name] = _loss_and_grads(
            torch.compile(model, options=options), distinct_tokens().to(device)
        )
        runs[name + " done"] = {k: inductor_fusion.REWRITES[k] - before[k] for k in before}
    layers = model.config.num_hidden_layers
    assert runs["fold done"]["backward_dy_sum"] == 2 * layers, runs["fold done"]
    assert runs["no fold done"]["backward_dy_sum"] == 0
    _assert_bitwise(runs["fold"], runs["no fold"])
