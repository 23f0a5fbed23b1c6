"""Helpers the kernels share: the programmatic-dependent-launch prologue, masked row loads and
stores, the exact widening of 16-bit floats to float32, and the thread-block cluster barrier."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .. import backend


@triton.jit
def _pdl_prologue(PDL: tl.constexpr):
    """With ``PDL`` (a launch with programmatic dependent launch, Hopper and newer): wait until
    the grid before this one in the stream has finished and its writes are visible, before this
    program touches memory; then let the grid after this one start launching (it waits the
    same way). Without it, nothing: the branch is compiled out."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def _row_load(ptrs, mask, UNMASKED: tl.constexpr, EVICT: tl.constexpr):
    """A row's values (0 where masked off); ``UNMASKED``: every lane is in the row; ``EVICT``:
    the load's eviction policy ("" or "evict_last": a cache hint, no value changes; passed at
    every call: Triton 3.6 does not compile a defaulted constexpr parameter of a helper)."""
    if UNMASKED:
        v = tl.load(ptrs, eviction_policy=EVICT)
    else:
        v = tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICT)
    return v


@triton.jit
def _row_store(ptrs, v, mask, UNMASKED: tl.constexpr):
    if UNMASKED:
        tl.store(ptrs, v)
    else:
        tl.store(ptrs, v, mask=mask)


#: float16 -> float32 in :func:`_widen_exact` through the hardware conversion (``cvt.f32.f16``,
#: one instruction, as inline PTX: opaque, so the compiler cannot merge it with another cast of
#: the same values) instead of rebuilding the float32 from the bits (about eight integer
#: instructions a value; the fp16 cluster backward 2048 x 32768 on an H100 177.4 us against
#: 222.0, experiments/kernel_perf/widen_ab.py). NVIDIA compiled kernels only: the interpreter
#: and ROCm run no PTX.
FP16_WIDEN_CVT = tl.constexpr(backend.BACKEND == "cuda" and torch.version.hip is None)


@triton.jit
def _widen_by_bits(v):
    """A 16-bit float tensor -> float32 exactly, computed from its bits (not a cast, which the
    compiler would merge with the reduction's cast). bfloat16 is float32's top half: a 16-bit
    shift. float16: sign, exponent and mantissa moved into float32's fields, then scaled by
    2**112 (the exponent biases' difference; exact for normals and subnormals alike), with inf
    and NaN (exponent all ones) rebuilt directly."""
    bits = v.to(tl.uint16, bitcast=True).to(tl.uint32)
    if v.dtype == tl.bfloat16:
        wide = (bits << 16).to(tl.float32, bitcast=True)
    else:
        sign = (bits & 0x8000) << 16
        body = (bits & 0x7FFF) << 13
        scaled = body.to(tl.float32, bitcast=True) * 5.192296858534828e33  # 2**112
        special = (body | 0x7F800000).to(tl.float32, bitcast=True)  # inf, or NaN's payload
        magnitude = tl.where((bits & 0x7C00) == 0x7C00, special, scaled)
        wide = (magnitude.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return wide


@triton.jit
def _widen_exact(v):
    """:func:`_widen_by_bits`'s values, float16 through ``cvt.f32.f16`` where FP16_WIDEN_CVT
    (the packed one-row pass, the cluster backward, the uncapped cluster forward: measured
    there). The cluster forward under a register cap keeps the bits: with the conversion ptxas
    spills 64 bytes under the fp16 plan's 64-register cap instead of 8 (sm_90, Triton 3.6), and
    on an H100 512 x 131072 fp16 took 114.1 us against 100.8 with the bits (57th session,
    widen_few_rows.sh PARTS=cluster); uncapped, the conversion won (8 x 16384: 103.2 against
    105.7; 4 x 65536 at 256 x 262144: 113.8 against 132.2)."""
    if v.dtype == tl.float16 and FP16_WIDEN_CVT:
        wide = tl.inline_asm_elementwise(
            "cvt.f32.f16 $0, $1;", "=r,h", [v], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        wide = _widen_by_bits(v)
    return wide


#: The cluster kernels' meeting point (forward and backward): every thread of the CTA arrives
#: (release) and waits (acquire) at its cluster's barrier, so each CTA's partial, stored before the
#: arrive, is visible to every CTA of the cluster after the wait.
_CLUSTER_BARRIER = tl.constexpr(
    "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\nmov.u32 $0, 0;"
)


@triton.jit
def _widened(v, ACC: tl.constexpr):
    """``v`` in ACC: 16-bit values by :func:`_widen_exact`, others cast."""
    if v.dtype == tl.float16 or v.dtype == tl.bfloat16:
        return _widen_exact(v).to(ACC)
    else:
        return v.to(ACC)
