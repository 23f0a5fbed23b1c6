"""Choose how the Triton kernels run: compiled on a CUDA GPU, or through Triton's interpreter.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, so this module must run
before :mod:`rmsnorm_kernel.kernels` is imported; the package ``__init__`` imports it first.

Import order: ``triton.language``'s own ``@jit`` helpers (``tl.sum``, ``tl.max``, ``tl.cdiv``, ...)
are decorated when triton is first imported. When something imported triton before this package
(``import triton``, ``torch._dynamo``, ``transformers``...) without ``TRITON_INTERPRET`` set, those
helpers are compiled-mode ``JITFunction`` objects, which the interpreter cannot call ("Cannot call
@triton.jit'd outside of the scope of a kernel"). So when the interpreter is chosen,
:func:`_interpret_triton_language` decorates each of them again (``triton.jit`` of the same Python
function, now in interpreter mode) and puts the new object wherever ``triton.language`` holds the
old one; then it checks that a fresh ``@triton.jit`` and every helper are interpreted, and raises
one :class:`ImportError` saying what to do if not. The opposite case (triton imported with
``TRITON_INTERPRET=1``, compiled kernels chosen later) raises that error too.

Rules, in order:
1. An explicit user setting of ``TRITON_INTERPRET`` wins, read as Triton reads it ("1", "true",
   "on", "yes", "y" in any case interpret; anything else compiles).
2. Without CUDA, the package sets ``TRITON_INTERPRET=1``: the *real* kernels run on the CPU.
3. Otherwise the kernels are compiled for the GPU.

There is never a silent fallback to the PyTorch reference: the choice is logged once and exposed
as :data:`BACKEND` ("interpreter" or "cuda").
"""

from __future__ import annotations

import logging
import os
import sys

import torch

logger = logging.getLogger("rmsnorm_kernel")

_ENV = "TRITON_INTERPRET"
#: The values Triton reads as true in a boolean environment variable (lower-cased, unstripped).
TRITON_TRUE = ("1", "true", "on", "yes", "y")


def _choose() -> tuple[str, str]:
    """Return ``(backend, reason)`` and set ``TRITON_INTERPRET`` when CUDA is absent."""
    if _ENV in os.environ:
        # Triton's own rule for a boolean variable (its getenv_bool): "true" interprets too,
        # and a backend read otherwise would disagree with what Triton then does.
        interpret = os.environ[_ENV].lower() in TRITON_TRUE
        backend = "interpreter" if interpret else "cuda"
        return backend, f"{_ENV}={os.environ[_ENV]!r} set by the user"
    if torch.cuda.is_available():
        return "cuda", "CUDA is available: kernels are compiled by Triton"
    os.environ[_ENV] = "1"
    return (
        "interpreter",
        f"CUDA is not available: set {_ENV}=1, kernels run in Triton's interpreter",
    )


_FIX = (
    "set TRITON_INTERPRET in the environment before Python starts (TRITON_INTERPRET=1 to "
    "interpret, as without a GPU; 0 to compile), or import rmsnorm_kernel before triton"
)


def _language_owners() -> list[object]:
    """Everything in the loaded ``triton.language`` modules that can hold a ``@jit`` helper: the
    modules themselves and the classes they define (``tl.tensor``'s member functions)."""
    owners: list[object] = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        owners.append(module)
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                owners.append(value)
    return owners


def _helpers(owners: list[object], wanted) -> list[tuple[object, str, object]]:
    """``(owner, name, value)`` for every attribute of ``owners`` for which ``wanted(value)``."""
    return [(o, k, v) for o in owners for k, v in list(vars(o).items()) if wanted(v)]


def _interpret_triton_language() -> int:
    """Make triton.language's ``@jit`` helpers interpreted ones; returns how many were replaced.

    Needed only when triton was imported before ``TRITON_INTERPRET=1`` was set (see the module
    docstring). Uses the public ``triton.jit`` on each helper's own function (``.fn``), and checks
    the result instead of assuming it, whatever the triton 3.x version.
    """
    import triton  # after TRITON_INTERPRET=1 is set: a first import decorates in interpreter mode
    from triton.runtime.jit import JITFunction

    def compiled(value) -> bool:  # the interpreter's InterpretedFunction is not a JITFunction
        return isinstance(value, JITFunction)

    def probe(x):  # never launched: only shows what @triton.jit makes now
        pass

    if compiled(triton.jit(probe)):
        raise ImportError(
            f"rmsnorm_kernel chose Triton's interpreter ({REASON}), but @triton.jit still makes "
            f"compiled kernels (is triton.knobs.runtime.interpret set to False?): {_FIX}"
        )
    new: dict[int, object] = {}  # one replacement per helper, however many names it has
    for owner, name, value in _helpers(_language_owners(), compiled):
        if id(value) not in new:
            new[id(value)] = triton.jit(value.fn)
        setattr(owner, name, new[id(value)])
    left = _helpers(_language_owners(), compiled)
    if left:
        names = sorted({f"{getattr(o, '__name__', o)}.{k}" for o, k, _ in left})
        raise ImportError(
            "triton was imported before rmsnorm_kernel without TRITON_INTERPRET=1, and these "
            f"triton.language helpers could not be switched to the interpreter: {names}; {_FIX}"
        )
    if new:
        logger.info(
            "triton was imported before rmsnorm_kernel: %d triton.language @jit helpers "
            "re-decorated for the interpreter",
            len(new),
        )
    return len(new)


def _check_compiled_triton_language() -> None:
    """Compiled kernels cannot call helpers triton decorated in interpreter mode: say so."""
    interpreter = sys.modules.get("triton.runtime.interpreter")  # never imported: nothing to see
    if interpreter is None or "triton.language" not in sys.modules:
        return
    left = _helpers(_language_owners(), lambda v: isinstance(v, interpreter.InterpretedFunction))
    if left:
        raise ImportError(
            f"rmsnorm_kernel chose compiled kernels ({REASON}), but triton was imported while "
            f"TRITON_INTERPRET=1, so its triton.language helpers are interpreter-only: {_FIX}"
        )


def _index_scalars_in_the_interpreter() -> bool:
    """Triton 3.6's interpreter turns a kernel scalar into an integer with ``int(array)``, where
    every scalar is a one-element 1-D array; NumPy 2.4 refuses that ("only 0-dimensional arrays
    can be converted"), so any loop bound that is a kernel argument fails (the backward's row
    loop, the forward's chunk loop). Later Triton squeezes first; here the interpreter's own
    ``__index__`` patch is wrapped to do the same. Returns whether the wrap was installed."""
    import triton.runtime.interpreter as interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_rmsnorm_kernel_index", False):
        return False

    def index(self) -> int:
        return int(self.handle.data.reshape(-1)[0])  # a NumPy array of one element

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", index)

    patched._rmsnorm_kernel_index = True
    interpreter._patch_lang_tensor = patched
    return True


def _bfloat16_to_nearest_in_the_interpreter() -> bool:
    """Triton's interpreter converts float32 to bfloat16 by dropping the low 16 bits (its casts
    pass no rounding mode, and even its "RTNE" adds the cut-off bit without carrying into the
    exponent), while a compiled kernel rounds to nearest, ties to even (``cvt.rn.bf16.f32``), as
    PyTorch does. Every bfloat16 value our kernels store is such a conversion (y, h, dx, dweight,
    Llama's intermediate rounding), so on CPU they were up to one ulp off the GPU's and PyTorch's
    bits. Here the interpreter's conversion rounds float32 to bfloat16 to nearest even (NaN stays
    NaN, its sign kept). The other way, its bfloat16 -> float32 conversion clamps a subnormal
    bfloat16's exponent to zero and so scales it wrongly (1e-39 came out 4.4e-39, a tiny
    gradient in dy as much as an input); bfloat16 is float32's top half, so here that
    conversion is the exact 16-bit shift, as on the GPU. Other conversions, and an explicit
    round-toward-zero, are its own. Returns whether the wrap was installed."""
    import triton.language as tl
    import triton.runtime.interpreter as interpreter

    original = getattr(interpreter, "_convert_float", None)
    if original is None or getattr(original, "_rmsnorm_kernel_rne", False):
        return False
    rtz = interpreter._ir.ROUNDING_MODE.RTZ

    def convert(input, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.bfloat16 and output_dtype == tl.float32:
            # ``input``: the interpreter's bfloat16 bits as uint16; exact, every value.
            bits = torch.from_numpy(input.reshape(-1).view("uint16").astype("int64")) << 16
            return bits.numpy().astype("uint32").reshape(input.shape)
        if input_dtype != tl.float32 or output_dtype != tl.bfloat16 or rounding_mode == rtz:
            return original(input, input_dtype, output_dtype, rounding_mode)
        # ``input``: the interpreter's float32 NumPy array; the bit arithmetic runs in torch (the
        # kernel layer imports only torch and triton), on int64 so nothing overflows.
        bits = torch.from_numpy(input.reshape(-1).view("uint32").astype("int64"))
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        nan = (bits & 0x7FFFFFFF) > 0x7F800000
        quiet = (bits >> 16) | 0x0040  # the sign and the payload's top bits, quieted
        out = torch.where(nan, quiet, rounded).numpy().astype("uint16")
        return out.reshape(input.shape)

    convert._rmsnorm_kernel_rne = True
    interpreter._convert_float = convert
    return True


BACKEND, REASON = _choose()
logger.info("rmsnorm_kernel backend: %s (%s)", BACKEND, REASON)
if BACKEND == "interpreter":
    _interpret_triton_language()
    _index_scalars_in_the_interpreter()
    _bfloat16_to_nearest_in_the_interpreter()
else:
    _check_compiled_triton_language()


def kernel_device() -> torch.device:
    """Where the kernels run: ``cuda`` when compiled, ``cpu`` when interpreted."""
    return torch.device("cpu") if BACKEND == "interpreter" else torch.device("cuda")
