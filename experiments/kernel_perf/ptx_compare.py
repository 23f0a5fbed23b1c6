"""The chunked forward's PTX beside ``wide_forward.py``'s hinted variant (no GPU needed): why did
that variant take 91.6 us against the package's 98.0 with the same hints at 512 x 131072 bf16 on
the H200 (36th session)? Compiles both for sm_90 and prints, per kernel, the shared memory, the
cubin's registers and the count of each memory instruction of interest (async copies, global
loads and stores, cache hints, vector widths); ``--dump DIR`` also writes each PTX there with
register names and labels normalised, ready for ``diff``.

    TRITON_INTERPRET=0 PYTHONPATH=src python experiments/kernel_perf/ptx_compare.py
    TRITON_INTERPRET=0 PYTHONPATH=<triton 3.6>:src python experiments/kernel_perf/ptx_compare.py
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import compile_check as cc  # noqa: E402  (sets TRITON_INTERPRET=0 before Triton's import)
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
import wide_forward as wf  # noqa: E402

from rmsnorm_kernel import kernels  # noqa: E402

M, N, BLOCK, WARPS = 512, 131072, 16384, 32
COUNTED = {
    "cp.async": r"cp\.async\.(ca|cg)",
    "ld.global": r"ld\.global",
    "st.global": r"st\.global",
    "evict_first": r"evict_first",
    "evict_last": r"evict_last",
    "st.cs": r"st\.global\.cs",
    "bar.sync": r"bar\.sync",
    "v4": r"\.v4",
}


def normalised(ptx: str) -> str:
    """The PTX with register names, labels, locations and comments replaced, blank lines out."""
    out = re.sub(r"%[a-z]+[0-9]+", "%R", ptx)
    out = re.sub(r"\$L__[A-Za-z0-9_]+", "L", out)
    out = re.sub(r"\.loc.*|//.*", "", out)
    return "\n".join(line for line in out.splitlines() if line.strip())


def kernels_to_compare():
    """(name, compiled kernel) of wide_forward's hinted variant and of the package's chunked
    forward (bf16, a weight, no residual) with and without stream / stages."""
    x, w, rstd = cc.t(M, N, dtype=torch.bfloat16), cc.t(N, dtype=torch.bfloat16), cc.t(M)
    hinted = (x, w, x, rstd, N, 1e-6, BLOCK, "evict_last", "evict_first", ".cs", False, 1)
    for stages in (3, 1):  # tune.py launches it with Triton's default num_stages, 3
        name = f"wide_forward hints, launch num_stages={stages}"
        yield name, cc.compile_one(wf.wide_forward_kernel, hinted, WARPS, num_stages=stages)
    for stream, stages in [(True, 1), (True, 3), (False, 1)]:
        consts = (True, False, False, tl.float32, BLOCK)
        flags = (False, False, False, False, "evict_last", True, False, stream, stages)
        args = (x, x, w, x, x, rstd, N, N, 1, N, 1e-6, 0.0, 0.0, 0.0, *consts, *flags)
        name = f"package stream={stream} stages={stages}"
        yield name, cc.compile_one(kernels.rmsnorm_forward_kernel, args, WARPS)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dump", default=None, help="write each normalised PTX into this folder")
    args = p.parse_args()
    import triton

    print(f"triton {triton.__version__}, sm_90, {M}x{N} bf16, block {BLOCK}, {WARPS} warps")
    for name, kernel in kernels_to_compare():
        ptx = kernel.asm["ptx"]
        counts = {k: len(re.findall(v, ptx)) for k, v in COUNTED.items()}
        print(f"{name:45s} shared={kernel.metadata.shared:6d} {counts} {cc.resources(kernel)}")
        if args.dump:
            folder = pathlib.Path(args.dump)
            folder.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
            (folder / f"{slug}.ptx").write_text(normalised(ptx) + "\n")


if __name__ == "__main__":
    main()
