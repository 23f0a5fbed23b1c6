"""The backend choice: interpreter without CUDA, compiled with it, an explicit setting wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

PROBE = (
    "import logging, os; logging.basicConfig(level=logging.INFO);"
    "import rmsnorm_kernel as rk;"
    "print('BACKEND', rk.BACKEND, os.environ.get('TRITON_INTERPRET'))"
)


def _run(env_value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if env_value is not None:
        env["TRITON_INTERPRET"] = env_value
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA default")
def test_no_cuda_chooses_the_interpreter_and_logs_it():
    out = _run(None)
    assert out.returncode == 0, out.stderr
    assert "BACKEND interpreter 1" in out.stdout
    assert "CUDA is not available" in out.stderr  # the choice is logged


def test_explicit_setting_wins():
    out = _run("1")
    assert out.returncode == 0, out.stderr
    assert "BACKEND interpreter 1" in out.stdout
    assert "set by the user" in out.stderr


@pytest.mark.parametrize(
    "value,backend",
    [("true", "interpreter"), ("Yes", "interpreter"), ("0", "cuda"), ("off", "cuda")],
)
def test_the_setting_is_read_as_triton_reads_it(value, backend):
    """TRITON_INTERPRET=true makes Triton interpret; the package used to call that "cuda"
    (only "1" counted), so its backend disagreed with what Triton did."""
    probe = PROBE + ";import triton; print('TRITON', triton.knobs.runtime.interpret)"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_INTERPRET"] = value
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert f"BACKEND {backend} {value}" in out.stdout, out.stderr[-2000:]
    assert f"TRITON {backend == 'interpreter'}" in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_compiled_backend_refuses_cpu_tensors_clearly():
    code = (
        "import torch, rmsnorm_kernel as rk\n"
        "try:\n    rk.rmsnorm(torch.ones(2, 4), None, 1e-6)\n"
        "except ValueError as e:\n    print('REFUSED', e)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert "REFUSED x must be on a CUDA device" in out.stdout, out.stdout + out.stderr


# Issue 15 item 2: whatever was imported first, the kernels run (forward and backward). On a
# machine without CUDA the package sets TRITON_INTERPRET=1 itself, after triton.language's own
# @jit helpers (tl.sum, ...) were decorated when something else imported triton first.
IMPORT_FIRST = {
    "rmsnorm_kernel": "import rmsnorm_kernel",
    "triton": "import triton, triton.language",
    "torch._dynamo": "import torch._dynamo",
    "transformers": "from transformers import LlamaForCausalLM",  # imports triton and dynamo
}
FORWARD_BACKWARD = """
import torch
import torch.nn.functional as F
import rmsnorm_kernel as rk

device = "cuda" if rk.BACKEND == "cuda" else "cpu"
torch.manual_seed(0)
x = torch.randn(6, 40, device=device, requires_grad=True)
w = torch.randn(40, device=device, requires_grad=True)
dy = torch.randn(6, 40, device=device)
y = rk.rmsnorm(x, w, 1e-6)
dx, dw = torch.autograd.grad(y, (x, w), dy)
y_ref = F.rms_norm(x, (40,), w, 1e-6)
dx_ref, dw_ref = torch.autograd.grad(y_ref, (x, w), dy)
torch.testing.assert_close(y, y_ref)
torch.testing.assert_close(dx, dx_ref)
torch.testing.assert_close(dw, dw_ref)
print("OK", rk.BACKEND)
"""


@pytest.mark.parametrize("first", list(IMPORT_FIRST))
def test_any_import_order_runs_the_kernels(first):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env.setdefault("HF_HUB_OFFLINE", "1")
    code = IMPORT_FIRST[first] + "\n" + FORWARD_BACKWARD
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    backend = "cuda" if torch.cuda.is_available() else "interpreter"
    assert f"OK {backend}" in out.stdout


def test_triton_imported_in_interpreter_mode_then_compiled_is_refused_at_import():
    """The opposite order: helpers decorated for the interpreter, compiled kernels chosen after.
    One clear ImportError that says what to do, instead of a failure inside a kernel call."""
    code = (
        "import os, triton\n"
        "os.environ['TRITON_INTERPRET'] = '0'\n"
        "try:\n    import rmsnorm_kernel\n"
        "except ImportError as e:\n    print('REFUSED', e)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "REFUSED rmsnorm_kernel chose compiled kernels" in out.stdout, out.stdout + out.stderr
    assert "import rmsnorm_kernel before triton" in out.stdout


def test_interpreter_scalars_index_with_any_numpy():
    """Triton 3.6's interpreter turns kernel scalars into ints with int(1-D array), which NumPy
    2.4 refuses: the package wraps that conversion (checked by hand with triton 3.6 + numpy
    2.4.6: every backward failed without it). Here: the wrap is installed in interpreter mode and
    turns a one-element 1-D array into its integer."""
    import numpy as np

    import rmsnorm_kernel as rk

    if rk.BACKEND != "interpreter":
        pytest.skip("the interpreter's scalars only exist in interpreter mode")
    import triton.language as tl
    from triton.runtime import interpreter

    assert getattr(interpreter._patch_lang_tensor, "_rmsnorm_kernel_index", False)

    class Scope:
        def set_attr(self, obj, name, value):
            setattr(self, name, value)

    scope = Scope()
    interpreter._patch_lang_tensor(tl.tensor, scope)
    handle = interpreter.TensorHandle(np.array([7], dtype=np.int32), tl.int32)
    fake = type("T", (), {"handle": handle})()
    assert scope.__index__(fake) == 7


def test_interpreter_rounds_float32_to_bfloat16_to_nearest_even():
    """Triton's interpreter truncated float32 -> bfloat16 (compiled kernels and PyTorch round to
    nearest, ties to even): the package wraps its conversion. Random bit patterns and the edge
    cases (ties, the carry into the exponent, the largest finite values, subnormals, infinities,
    NaNs) convert exactly as torch converts them; NaN stays NaN; round-toward-zero, asked for
    explicitly, stays the interpreter's own."""
    import numpy as np

    import rmsnorm_kernel as rk

    if rk.BACKEND != "interpreter":
        pytest.skip("the interpreter's conversion only exists in interpreter mode")
    import triton.language as tl
    from triton.runtime import interpreter

    assert getattr(interpreter._convert_float, "_rmsnorm_kernel_rne", False)
    edges = [0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x7F7F8000, 0x00008000, 0x00018000]
    edges += [0x00000001, 0x80000001, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFF800001, 0x80000000]
    rng = np.random.default_rng(0)
    bits = np.concatenate([rng.integers(0, 2**32, 199_990, dtype=np.uint64), edges])
    values = bits.astype(np.uint32).view(np.float32).reshape(-1, 7)
    got = interpreter._convert_float(values, tl.float32, tl.bfloat16, None)
    assert got.shape == values.shape and got.dtype == np.uint16
    want = torch.from_numpy(values.copy()).to(torch.bfloat16).view(torch.int16).numpy()
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], want.view(np.uint16)[~nan])
    as_bf16 = torch.from_numpy(got.view(np.int16).copy()).view(torch.bfloat16).float()
    assert torch.isnan(as_bf16[torch.from_numpy(nan)]).all()
    rtz = interpreter._convert_float(
        values, tl.float32, tl.bfloat16, interpreter._ir.ROUNDING_MODE.RTZ
    )
    normal = np.isfinite(values) & (np.abs(values) >= np.finfo(np.float32).tiny)
    truncated = (values.view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(rtz[normal], truncated[normal])


def test_interpreter_widens_bfloat16_to_float32_exactly():
    """Triton's interpreter scaled subnormal bfloat16 values wrongly when widening them to
    float32 (1e-39 became 4.4e-39): the package's wrap widens every bfloat16 bit pattern exactly,
    as torch does (NaN payloads included: bfloat16 is float32's top half). End to end, a row of
    subnormal bfloat16 values normalises to F.rms_norm's bits."""
    import numpy as np

    import rmsnorm_kernel as rk

    if rk.BACKEND != "interpreter":
        pytest.skip("the interpreter's conversion only exists in interpreter mode")
    import triton.language as tl
    from triton.runtime import interpreter

    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16).reshape(-1, 16)
    got = interpreter._convert_float(bits, tl.bfloat16, tl.float32, None)
    assert got.shape == bits.shape
    want = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).float()
    want_bits = want.view(torch.int32).numpy().view(np.uint32)
    np.testing.assert_array_equal(got.view(np.uint32), want_bits)
    x = torch.tensor([[1e-39, 2e-39, -1e-39, 3e-39], [1.0, -2.0, 3.0, 5e-41]], dtype=torch.bfloat16)
    expected = torch.nn.functional.rms_norm(x, (4,), None, 1e-6)
    assert torch.equal(rk.rms_norm(x, (4,), None, 1e-6), expected)


def test_float16_is_widened_by_the_conversion_instruction_only_when_compiled():
    """kernels.FP16_WIDEN_CVT: compiled kernels widen float16 with ``cvt.f32.f16`` (inline PTX,
    one instruction; the bit rebuild cost the fp16 cluster backward 17-20% on an H100); the
    interpreter and ROCm, which run no PTX, rebuild the float32 from the bits. Both are exact: every
    float16 bit pattern through the packed pass is checked against the cast on the GPU
    (test_forward_variants.py::test_packed_pass_widens_every_bit_pattern_exactly)."""
    import rmsnorm_kernel as rk
    from rmsnorm_kernel import kernels

    nvidia = torch.version.hip is None
    assert kernels.FP16_WIDEN_CVT.value is (rk.BACKEND == "cuda" and nvidia)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_compiled_kernels_asked_for_without_cuda_are_refused_before_any_run(tmp_path):
    """TRITON_INTERPRET=0 on a machine without CUDA: training norm=triton used to pass every
    pre-check, make the run dir and fail at step 1 (a 66-line traceback); check-environment,
    meant to diagnose it, crashed with torch's AssertionError."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    train = subprocess.run(
        [sys.executable, "-m", "rmsnorm_kernel.train", "norm=triton", "debug=cpu_small"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert train.returncode == 2, train.stderr[-2000:]
    assert train.stderr.strip() == (
        "error: model.net.norm: the Triton kernels need a CUDA GPU or Triton's interpreter; "
        "TRITON_INTERPRET='0' set by the user asks for compiled kernels and torch sees no CUDA "
        "GPU here: unset TRITON_INTERPRET (or set it to 1)"
    )
    assert list(tmp_path.iterdir()) == []
    check = subprocess.run(
        [sys.executable, "-m", "rmsnorm_kernel.cli", "check-environment"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert check.returncode == 1 and "Traceback" not in check.stderr
    assert "FAIL: TRITON_INTERPRET asks for compiled kernels" in check.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's numpy warnings")
def test_the_interpreter_gives_inf_and_nan_without_numpy_warnings():
    """A zero row with eps=0 and an overflowing sum of squares: F.rms_norm is silent, and the
    interpreter printed numpy's RuntimeWarnings from Triton's internals."""
    import warnings

    import rmsnorm_kernel as rk

    x = torch.randn(3, 64)
    x[1] = 0
    x[2] = 1e20
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = rk.rms_norm(x, (64,), eps=0.0)
    want = torch.nn.functional.rms_norm(x, (64,), eps=0.0)
    assert torch.equal(y.isnan(), want.isnan()) and torch.equal(y[2], want[2])
