"""The drop-ins ``rms_norm`` / ``RMSNorm`` on PyTorch's own test inputs for ``F.rms_norm`` and
``nn.RMSNorm``: the sample and error inputs of its OpInfo (``common_methods_invocations``,
torch 2.13) and the module inputs of its ModuleInfo (``common_modules``), written out here
(``torch.testing._internal`` is not a stable API). Code and tests written against torch keep
working: the same values and gradients, any finite eps as torch takes it (``eps <= 0`` too), and
errors that carry torch's own sentences, which its error inputs match."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_helpers import TOLERANCES, oracle_y

import rmsnorm_kernel as rk
from rmsnorm_kernel.contract import ContractValueError

#: OpInfo ``nn.functional.rms_norm`` samples: (input shape, normalized_shape, weight?, eps).
OPINFO_SAMPLES = [
    ((1, 2, 3), (1, 2, 3), True, 0.5),
    ((2, 2, 3), (2, 3), True, -0.5),
    ((1,), (1,), True, None),
    ((1, 2), (2,), True, None),
    ((0, 1), (1,), True, None),
    ((1, 2), (2,), False, None),
]

#: Its error inputs: (input shape, normalized_shape, weight shape, torch's error regex).
OPINFO_ERRORS = [
    ((1, 2, 3), (), None, "Expected normalized_shape to be at least 1-dimensional"),
    ((1, 2, 3), (1, 2, 3), (1, 2), "Expected weight to be of same shape as normalized_shape"),
    ((2, 2, 3), (2, 2), None, "Given normalized_shape="),
]

#: ModuleInfo ``nn.RMSNorm`` inputs: (constructor args, forward input shape).
MODULE_INPUTS = [
    (([5], 1e-3), (4, 5, 5)),
    (([5], 1e-3), (128, 5, 5)),
    (([5], 1e-3, False), (4, 5, 5)),
    (([2, 2, 5], 1e-3), (4, 2, 2, 5)),
    (([2, 2, 5], 1e-3, False), (4, 2, 2, 5)),
    (([5], 1e-3), (0, 5)),
]


def _close(actual, expected, dtype, what):
    """Within ``dtype``'s tolerances, NaN where torch has NaN (eps <= 0 rows)."""
    torch.testing.assert_close(
        actual.double().cpu(),
        expected.double().cpu(),
        equal_nan=True,
        msg=lambda m: f"{what}: {m}",
        **TOLERANCES[dtype],
    )


def _both(fn_ours, fn_torch, x, w):
    """``(y, dx, dweight)`` of each implementation for one upstream gradient."""
    out = []
    dy = None
    for fn in (fn_ours, fn_torch):
        xi = x.clone().requires_grad_()
        wi = None if w is None else w.clone().requires_grad_()
        y = fn(xi, wi)
        dy = torch.randn_like(y) if dy is None else dy
        inputs = [t for t in (xi, wi) if t is not None]
        grads = torch.autograd.grad(y, inputs, dy) if y.numel() else ()
        out.append((y, *grads))
    return out


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("shape", "normalized", "affine", "eps"), OPINFO_SAMPLES)
def test_opinfo_samples_match_torch(shape, normalized, affine, eps, dtype, device):
    """Values and gradients as F.rms_norm's; the eps=-0.5 sample has rows whose mean square is
    under 0.5, NaN in both."""
    x = torch.randn(shape, device=device, dtype=dtype)
    w = torch.randn(normalized, device=device, dtype=dtype) if affine else None
    ours, theirs = _both(
        lambda x, w: rk.rms_norm(x, normalized, w, eps),
        lambda x, w: F.rms_norm(x, normalized, w, eps),
        x,
        w,
    )
    assert len(ours) == len(theirs)
    for what, a, b in zip(("y", "dx", "dweight"), ours, theirs, strict=False):
        _close(a, b, dtype, what)


@pytest.mark.parametrize(("shape", "normalized", "weight_shape", "regex"), OPINFO_ERRORS)
def test_opinfo_error_inputs_raise_as_torch(shape, normalized, weight_shape, regex, device):
    """torch's error inputs raise RuntimeError matching torch's regex, from torch and from us,
    before any launch."""
    x = torch.randn(shape, device=device)
    w = None if weight_shape is None else torch.randn(weight_shape, device=device)
    with pytest.raises(RuntimeError, match=regex):
        F.rms_norm(x, normalized, w, 1e-5)
    with pytest.raises(RuntimeError, match=regex):
        rk.rms_norm(x, normalized, w, 1e-5)
    assert rk.CALLS["forward"] == 0


@pytest.mark.parametrize(("args", "shape"), MODULE_INPUTS)
def test_module_inputs_match_torch(args, shape, device):
    """nn.RMSNorm's ModuleInfo inputs, training: output, input gradient and weight gradient."""
    torch.manual_seed(0)
    theirs = torch.nn.RMSNorm(*args, device=device)
    ours = rk.RMSNorm(*args, device=device)
    if theirs.weight is not None:
        with torch.no_grad():
            theirs.weight.normal_()
        ours.load_state_dict(theirs.state_dict())
    x = torch.randn(shape, device=device)
    res = _both(lambda x, _: ours(x), lambda x, _: theirs(x), x, None)
    for what, a, b in zip(("y", "dx"), *res, strict=False):
        _close(a, b, torch.float32, what)
    if theirs.weight is not None and x.numel():
        dy = torch.randn(shape, device=device)
        ours(x).backward(dy)
        theirs(x).backward(dy)
        _close(ours.weight.grad, theirs.weight.grad, torch.float32, "dweight")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("eps", [0.0, -0.25])
def test_drop_ins_take_eps_torch_takes(eps, dtype, device):
    """eps <= 0: rows whose mean square exceeds -eps normalise as the oracle says, the others
    (here a zero row) are NaN, as in F.rms_norm; the module too."""
    x = torch.tensor([[1.0, -2.0, 3.0, 0.5], [0.0, 0.0, 0.0, 0.0], [2.0, 2.0, -1.0, 4.0]])
    x, w = x.to(device, dtype), torch.tensor([0.5, 1.0, -1.5, 2.0], device=device, dtype=dtype)
    y = rk.rms_norm(x, (4,), w, eps)
    _close(y, F.rms_norm(x, (4,), w, eps), dtype, "y")
    _close(y[[0, 2]], oracle_y(x[[0, 2]], w, eps), dtype, "y against the oracle")
    assert torch.isnan(y[1]).all()
    norm = rk.RMSNorm(4, eps=eps, device=device, dtype=dtype)
    assert torch.isnan(norm(x)[1]).all() and torch.isfinite(norm(x)[[0, 2]]).all()


@pytest.mark.parametrize("eps", [0.0, -1e-6])
def test_rmsnorm_keeps_the_tutorial_eps_rule(eps, device):
    """The tutorial's entry points still refuse eps <= 0, and the drop-ins non-finite eps."""
    x = torch.randn(2, 8, device=device)
    with pytest.raises(ValueError, match="eps must be > 0"):
        rk.rmsnorm(x, None, eps)
    with pytest.raises(ValueError, match="eps must be > 0"):
        rk.forward_op(x, None, eps)
    with pytest.raises(ValueError, match="eps must be finite"):
        rk.rms_norm(x, (8,), None, float("nan"))
    with pytest.raises(ValueError, match="eps must be finite"):
        rk.RMSNorm(8, eps=float("-inf"), device=device)(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("shape", "normalized", "affine"),
    [((2, 0), (0,), True), ((2, 0), (0,), False), ((3, 4, 0), (4, 0), True), ((0, 0), (0,), True)],
)
def test_rows_of_no_values_come_back_empty_as_from_torch(shape, normalized, affine, dtype, device):
    """N = prod(normalized_shape) = 0: F.rms_norm and nn.RMSNorm return the empty rows (there is
    nothing to normalise), with empty gradients; so do the drop-ins, with no launch."""
    x = torch.randn(shape, device=device, dtype=dtype)
    w = torch.randn(normalized, device=device) if affine else None  # float32, as a master copy
    rk.reset_calls()
    ours, theirs = _both(
        lambda x, w: rk.rms_norm(x, normalized, w),
        lambda x, w: F.rms_norm(x, normalized, w),
        x,
        w,
    )
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
    grads = []
    for fn in (rk.rms_norm, F.rms_norm):
        xi = x.clone().requires_grad_()
        wi = None if w is None else w.clone().requires_grad_()
        fn(xi, normalized, wi).sum().backward()
        grads.append([(t.grad.shape, t.grad.dtype) for t in (xi, wi) if t is not None])
    assert grads[0] == grads[1]
    y = rk.RMSNorm(normalized, elementwise_affine=affine, device=device)(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rk.CALLS["forward"] == 0


def test_rows_of_no_values_still_check_dtypes_devices_and_eps(device):
    x = torch.zeros(2, 0, device=device)
    with pytest.raises(TypeError, match="^input must have dtype"):
        rk.rms_norm(x.int(), (0,))
    with pytest.raises(ValueError, match="^weight must be on input's device"):
        rk.rms_norm(x, (0,), torch.zeros(0, device="meta"))
    with pytest.raises(TypeError, match="weight must have dtype"):
        rk.rms_norm(x, (0,), torch.zeros(0, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match="eps must be finite"):
        rk.rms_norm(x, (0,), None, float("inf"))
    with pytest.raises(RuntimeError, match="Expected weight to be of same shape"):
        rk.rms_norm(x, (0,), torch.zeros(1, device=device))


#: normalized_shape values torch refuses with a TypeError (it takes an int or ints in a sequence).
BAD_SHAPES = ["8", [8.0], 8.0, True, [True], None, torch.tensor(8)]


@pytest.mark.parametrize("normalized", BAD_SHAPES, ids=repr)
def test_normalized_shape_of_other_types_is_refused_as_by_torch(normalized, device):
    x = torch.randn(3, 8, device=device)
    with pytest.raises(TypeError):
        F.rms_norm(x, normalized)
    with pytest.raises(TypeError, match="normalized_shape must be an int"):
        rk.rms_norm(x, normalized)
    with pytest.raises(TypeError, match="normalized_shape must be an int"):
        rk.RMSNorm(normalized, device=device)
    assert rk.CALLS["forward"] == 0


@pytest.mark.parametrize("normalized", [-3, (2, -1)], ids=repr)
def test_a_negative_normalized_shape_is_refused_by_name(normalized, device):
    """torch's ``RMSNorm(-3)`` fails creating its weight ("negative dimension"), its functional
    on the shape; ours names the argument and the rule (still a RuntimeError, as torch's)."""
    with pytest.raises(RuntimeError):
        torch.nn.RMSNorm(normalized, device=device)
    x = torch.randn(3, 2, 4, device=device)
    for call in (lambda: rk.RMSNorm(normalized, device=device), lambda: rk.rms_norm(x, normalized)):
        with pytest.raises(ContractValueError, match=r"normalized_shape must hold sizes >= 0") as e:
            call()
        assert isinstance(e.value, RuntimeError)
    assert rk.CALLS["forward"] == 0


def test_normalized_shape_as_int_list_tuple_or_size(device):
    x = torch.randn(3, 2, 4, device=device)
    expected = F.rms_norm(x, (2, 4))
    for normalized in ([2, 4], (2, 4), torch.Size([2, 4])):
        torch.testing.assert_close(rk.rms_norm(x, normalized), expected)
    torch.testing.assert_close(rk.rms_norm(x, 4), F.rms_norm(x, (4,)))  # an int: as nn.RMSNorm


def test_inputs_that_are_not_tensors_are_refused_by_name(device):
    x = torch.randn(3, 8, device=device)
    with pytest.raises(TypeError, match="input must be a torch.Tensor"):
        rk.rms_norm([[1.0] * 8], (8,))
    with pytest.raises(TypeError, match="weight must be a torch.Tensor or None"):
        rk.rms_norm(x, (8,), [1.0] * 8)
    assert rk.CALLS["forward"] == 0


@pytest.mark.parametrize("entry", ["module", "rmsnorm"])
def test_an_inference_mode_input_still_gives_the_weight_its_gradient(entry, device):
    """x made under torch.inference_mode, a weight that requires grad: the weight's gradient
    needs x, and an inference tensor cannot be saved, so a normal copy is (torch's CPU path
    works here too; its fused CUDA kernel saves x itself and raises). The reference runs on
    that copy."""
    with torch.inference_mode():
        x = torch.randn(3, 8, device=device)
    ref = torch.nn.RMSNorm(8, eps=1e-6, device=device)
    ref.weight.data.uniform_(0.5, 1.5)
    ref(x.clone()).square().sum().backward()
    w = ref.weight.detach().clone().requires_grad_(True)
    if entry == "module":
        ours = rk.RMSNorm(8, eps=1e-6, device=device)
        ours.weight.data.copy_(w.detach())
        y, w = ours(x), ours.weight
    else:
        y = rk.rmsnorm(x, w, 1e-6)
    y.square().sum().backward()
    torch.testing.assert_close(y, ref(x.clone()), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, ref.weight.grad, rtol=1e-5, atol=1e-5)


def test_an_inference_mode_input_of_no_columns_beside_a_weight_that_needs_grad(device):
    """N = 0 (nothing launched; F.rms_norm returns the rows empty) with an inference-mode input
    and a weight that requires grad: as F.rms_norm, an empty output in the graph (it used to
    raise "Inference tensors cannot be saved for backward"). The expectation comes from torch's
    composite CPU path: its fused CUDA kernel raises that error here itself."""
    with torch.inference_mode():
        x = torch.randn(3, 0, device=device)
        x_cpu = torch.randn(3, 0)
    w = torch.randn(0, device=device, requires_grad=True)
    y = rk.rms_norm(x, (0,), w)
    want = torch.nn.functional.rms_norm(x_cpu, (0,), w.detach().cpu().requires_grad_())
    assert y.shape == want.shape and y.requires_grad == want.requires_grad
    y.sum().backward()
    assert w.grad is not None and w.grad.shape == (0,)


def test_several_normalised_dims_over_the_limit_name_normalized_shape(device):
    """N = prod(normalized_shape) past MAX_N: the message names normalized_shape and N, not
    "the last dim" (1024 here)."""
    x = torch.empty(1, 3, 1024, 1024, device="meta")
    with pytest.raises(rk.ContractValueError, match=r"normalized_shape=\(3, 1024, 1024\) makes"):
        rk.rms_norm(x, (3, 1024, 1024))


@pytest.mark.parametrize(
    "shape,fmt", [((4, 2, 2, 5), torch.channels_last), ((2, 3, 2, 2, 5), torch.channels_last_3d)]
)
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_a_channels_last_input_keeps_its_layout_as_in_torch(shape, fmt, dims, device):
    """F.rms_norm's output takes a channels-last input's memory format (PyTorch's ModuleInfo
    test_memory_format checks it); ours came out contiguous. Eager, compiled and module."""
    x = torch.randn(shape, device=device).to(memory_format=fmt).requires_grad_()
    ns = shape[-dims:]
    w = torch.randn(ns, device=device)
    expected = F.rms_norm(x, ns, w, 1e-6)
    assert expected.is_contiguous(memory_format=fmt) and not expected.is_contiguous()
    module = rk.RMSNorm(ns, eps=1e-6, device=device)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: rk.rms_norm(a, ns, w, 1e-6), fullgraph=True)
    for name, y in (
        ("rms_norm", rk.rms_norm(x, ns, w, 1e-6)),
        ("compiled", compiled(x)),
        ("RMSNorm", module(x) * w),
    ):
        assert y.stride() == expected.stride(), name
        torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5)
    if dims == 1:
        y, h = rk.rmsnorm(x, w, 1e-6, residual=torch.zeros_like(x))
        assert y.stride() == h.stride() == expected.stride()
    # the input's gradient keeps the layout too (eager), as F.rms_norm's does
    dy = torch.randn_like(expected)
    (want,) = torch.autograd.grad(expected, x, dy)
    (got,) = torch.autograd.grad(rk.rms_norm(x, ns, w, 1e-6), x, dy)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
