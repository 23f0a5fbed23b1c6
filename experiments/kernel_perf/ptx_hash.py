"""A fingerprint of every kernel variant compile_check.py compiles: a hash of its PTX and its
registers, one line per variant, so that a refactor of a kernel can be shown to change no
instruction (no GPU needed).

Debug-only lines are left out of the hash: ``.loc`` / ``.file`` directives, debug sections and
the ``$L__tmp`` labels that mark inlined scopes (an extracted helper adds some). ptxas still sees
those labels, so registers can move by a few even where the instructions are identical; the
registers column shows it. Run it on the code before and after the change and diff the outputs:

    TRITON_INTERPRET=0 FILTER='^bwd ' PYTHONPATH=<triton 3.6>:<package src> \
        python experiments/kernel_perf/ptx_hash.py > before.txt
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compile_check as cc  # noqa: E402  (sets TRITON_INTERPRET=0 before Triton loads)


def normalised(ptx: str) -> str:
    """The PTX without what only debuggers read."""
    out, in_debug = [], False
    for line in ptx.splitlines():
        text = line.strip()
        if text.startswith(".section") and "debug" in text:
            in_debug = True
        if in_debug:
            in_debug = text != "}"
            continue
        if re.match(r"^\$L__tmp\d+:$", text) or text.startswith((".loc", ".file", "//")):
            continue
        out.append(re.sub(r"//.*", "", line))
    return "\n".join(out)


def main() -> None:
    only = re.compile(os.environ.get("FILTER", ""))
    every = itertools.chain(
        cc.variants(), cc.cluster_variants(), cc.launch_cluster_variants(), cc.columns_variants()
    )
    for name, fn, args, warps, *extra in every:
        if not only.search(name):
            continue
        kernel = cc.compile_one(fn, args, warps, *extra)
        digest = hashlib.sha1(normalised(kernel.asm["ptx"]).encode()).hexdigest()[:12]
        print(name, digest, cc.resources(kernel).split()[0], flush=True)


if __name__ == "__main__":
    main()
