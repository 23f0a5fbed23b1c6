"""flash-attention's PyTorch references ``rms_norm_ref`` and ``layer_norm_ref``, for its tests.

flash-attn's own test file (``tests/ops/triton/test_layer_norm.py``) imports these two beside
``layer_norm_fn`` and judges the Triton result by them: ``|out - ref| <= 2 |pt - ref| + atol``,
``pt`` the reference in the inputs' dtypes, ``ref`` the same with ``upcast=True`` (float32). They
are written here from flash-attn's documented semantics, so that its tests import from
:mod:`rmsnorm_kernel.integrations.flash_attn` unchanged. Plain PyTorch ops, every argument
flash-attn's reference takes (dropout, rowscale, the parallel ``x1`` / ``weight1`` / ``bias1``
norm), none of this package's kernels:

    x = dropout(rowscale * x) (+ dropout(x1)); x = (x + residual) in x's dtype  # returned: prenorm
    rms_norm_ref:   (x / sqrt(mean(x**2) + eps) * weight (+ bias)), in x's original dtype
    layer_norm_ref: F.layer_norm(x in weight's dtype, weight, bias, eps), in x's original dtype

``upcast=True``: every operand in float32 first. ``zero_centered_weight``: ``weight + 1``.
``dropout_mask`` (bool, True = kept): that dropout, else a fresh ``F.dropout``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _dropout(t, p, mask):
    if mask is None:
        return F.dropout(t, p=p)
    return t.masked_fill(~mask, 0.0) / (1.0 - p)


def _reference(
    norm, x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm,
    zero_centered_weight, dropout_mask, dropout_mask1, upcast,
):  # fmt: skip
    """flash-attn's reference prologue (upcast, dropout, rowscale, x1, residual), then ``norm``
    with each weight; ``out``, ``(out, out1)``, and the summed ``x`` appended with ``prenorm``."""
    dtype = x.dtype
    if upcast:
        up = lambda t: None if t is None else t.float()  # noqa: E731
        x, weight, bias, residual, x1, weight1, bias1 = map(
            up, (x, weight, bias, residual, x1, weight1, bias1)
        )
    if zero_centered_weight:
        weight = weight + 1.0
        weight1 = None if weight1 is None else weight1 + 1.0
    if x1 is not None and rowscale is not None:  # flash-attn asserts this
        raise AssertionError("rowscale is not supported with the parallel norm: x1 must be None")
    if rowscale is not None:
        x = x * rowscale[..., None]
    if dropout_p > 0.0:
        x = _dropout(x, dropout_p, dropout_mask)
        if x1 is not None:
            x1 = _dropout(x1, dropout_p, dropout_mask1)
    if x1 is not None:
        x = x + x1
    if residual is not None:
        x = (x + residual).to(x.dtype)
    outs = [norm(x, weight, bias, eps).to(dtype)]
    if weight1 is not None:
        outs.append(norm(x, weight1, bias1, eps).to(dtype))
    if prenorm:
        outs.append(x)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _rms(x, weight, bias, eps):
    y = x * (1 / torch.sqrt(x.square().mean(dim=-1, keepdim=True) + eps)) * weight
    return y if bias is None else y + bias


def _layer(x, weight, bias, eps):
    return F.layer_norm(x.to(weight.dtype), x.shape[-1:], weight=weight, bias=bias, eps=eps)


def rms_norm_ref(
    x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0,
    rowscale=None, prenorm=False, zero_centered_weight=False, dropout_mask=None,
    dropout_mask1=None, upcast=False,
):  # fmt: skip
    """``flash_attn.ops.triton.layer_norm.rms_norm_ref`` (module docstring): ``out``;
    ``(out, x + residual)`` with ``prenorm``; ``out1`` after ``out`` when ``weight1`` is given."""
    return _reference(
        _rms, x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm,
        zero_centered_weight, dropout_mask, dropout_mask1, upcast,
    )  # fmt: skip


def layer_norm_ref(
    x, weight, bias, residual=None, x1=None, weight1=None, bias1=None, eps=1e-6, dropout_p=0.0,
    rowscale=None, prenorm=False, zero_centered_weight=False, dropout_mask=None,
    dropout_mask1=None, upcast=False,
):  # fmt: skip
    """``flash_attn.ops.triton.layer_norm.layer_norm_ref``: LayerNorm in PyTorch, for flash-attn's
    tests (this package's kernels compute RMSNorm only; :func:`.flash_attn.layer_norm_fn`
    refuses ``is_rms_norm=False``)."""
    return _reference(
        _layer, x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm,
        zero_centered_weight, dropout_mask, dropout_mask1, upcast,
    )  # fmt: skip
