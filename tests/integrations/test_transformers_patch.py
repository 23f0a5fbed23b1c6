"""``patch`` / ``unpatch`` on tiny Hugging Face models of each family (CPU, float32).

Tolerances were fixed before the first run. Patched and unpatched models differ only in float32
arithmetic order (the kernel's ``1/sqrt`` and row sum vs torch's ``rsqrt`` and ``mean``), i.e. a
few ulps per norm, so logits must agree to 1e-5 and every parameter gradient to 1e-5 + 1e-4 rel.
"""

from __future__ import annotations

import pytest
import torch
from hf_models import FAMILIES, logits_and_grads, tiny_model, tokens

import rmsnorm_kernel as rk
from rmsnorm_kernel.integrations.transformers import is_patched, patch, unpatch

LOGITS_TOL = {"atol": 1e-5, "rtol": 1e-5}
GRAD_TOL = {"atol": 1e-5, "rtol": 1e-4}


def norm_modules(model) -> dict[str, torch.nn.Module]:
    return {n: m for n, m in model.named_modules() if "RMSNorm" in type(m).__name__}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_model_matches_unpatched(family, device):
    model = tiny_model(family).to(device)
    ids = tokens().to(device)
    norms = norm_modules(model)
    classes = {n: type(m) for n, m in norms.items()}
    params = {n: p for n, p in model.named_parameters()}
    keys = list(model.state_dict())
    ref_logits, ref_grads = logits_and_grads(model, ids)

    count = patch(model)

    # Every norm module, and only those, became a kernel subclass of its own class, in place.
    assert count == len(norms) > 0
    for name, module in model.named_modules():
        if name in norms:
            assert module is norms[name]
            assert is_patched(module) and isinstance(module, classes[name])
            # the same name (exact-name lookups find it) and a repr that says it is patched
            assert type(module).__name__ == classes[name].__name__
            assert "rmsnorm_kernel=" in repr(module)
    if family in ("qwen3", "gemma3"):  # the per-head q/k norms over head_dim are patched too
        assert is_patched(model.model.layers[0].self_attn.q_norm)
    # Same Parameter objects and state_dict keys: optimizers and checkpoints are unaffected.
    assert all(p is params[n] for n, p in model.named_parameters())
    assert list(model.state_dict()) == keys

    rk.reset_calls()
    logits, grads = logits_and_grads(model, ids)
    # Each norm runs once per forward and once per backward, through the kernel.
    assert rk.CALLS == {"forward": count, "backward": count}
    torch.testing.assert_close(logits, ref_logits, **LOGITS_TOL)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], **GRAD_TOL, msg=lambda m, n=name: n + m)

    assert patch(model) == 0  # already patched: nothing new
    assert unpatch(model) == count
    assert {n: type(m) for n, m in norm_modules(model).items()} == classes
    rk.reset_calls()
    restored, _ = logits_and_grads(model, ids)
    assert rk.CALLS == {"forward": 0, "backward": 0}
    torch.testing.assert_close(restored, ref_logits, atol=0, rtol=0)


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_save_pretrained_round_trip(family, tmp_path, device):
    model = tiny_model(family).to(device)
    ids = tokens().to(device)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    patch(model)
    with torch.no_grad():
        patched = model(input_ids=ids).logits
    model.save_pretrained(tmp_path)

    loaded = FAMILIES[family][1].from_pretrained(tmp_path).to(device).eval()
    assert list(loaded.state_dict()) == list(model.state_dict())
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, ref, atol=0, rtol=0)
        assert patch(loaded) == len(norm_modules(loaded))
        torch.testing.assert_close(loaded(input_ids=ids).logits, patched, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_patched_model_with_a_strided_norm_weight(dtype, device):
    """A final-norm weight that is a column of a bigger matrix (stride 3, not contiguous): the
    patched model's logits and that weight's gradient match the unpatched model's (the kernel
    used to read it as if contiguous: logits off by 0.88)."""
    model = tiny_model("llama").to(device=device, dtype=dtype)
    norm = model.model.norm
    big = torch.randn(norm.weight.shape[0], 3, device=device, dtype=dtype)
    big[:, 1] = norm.weight.detach()
    norm.weight = torch.nn.Parameter(big[:, 1])
    assert not norm.weight.is_contiguous() and norm.weight.stride() == (3,)
    ids = tokens().to(device)
    ref_logits, ref_grads = logits_and_grads(model, ids)
    assert patch(model) > 0
    logits, grads = logits_and_grads(model, ids)
    tol = LOGITS_TOL if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(logits, ref_logits, **tol)
    torch.testing.assert_close(
        grads["model.norm.weight"],
        ref_grads["model.norm.weight"],
        **(GRAD_TOL if dtype == torch.float32 else tol),
    )


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_patched_model_on_meta_has_the_real_shapes(device, family):
    """A model moved to the meta device (shape and memory planning before weights are loaded)
    runs its patched norms there: the logits and every gradient have the shapes and dtypes of
    the same model on CPU, and no kernel runs."""
    real = tiny_model(family).to(device, torch.bfloat16)
    meta = tiny_model(family).to(torch.bfloat16).to("meta")
    for model in (real, meta):
        patch(model, inductor_fusion=False)
    before = dict(rk.CALLS)
    out = meta(tokens().to("meta"), labels=tokens().to("meta"))
    out.loss.backward()
    assert rk.CALLS == before
    ids = tokens().to(device)
    ref = real(ids, labels=ids)
    ref.loss.backward()
    assert (out.logits.shape, out.logits.dtype) == (ref.logits.shape, ref.logits.dtype)
    # (moving Gemma3 to meta unties its lm_head from the embedding: compare real's parameters)
    meta_params = dict(meta.named_parameters())
    for name, q in real.named_parameters():
        p = meta_params[name]
        assert p.grad.is_meta and (p.grad.shape, p.grad.dtype) == (q.grad.shape, q.grad.dtype), name
