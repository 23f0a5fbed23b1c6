"""Swap rmsnorm_kernel's drop-ins into PyTorch's OpInfo / ModuleInfo databases.

Loaded by pytest before the test modules are imported (``run.sh`` copies it in as conftest.py).

RMSNORM_SWAP=0: the baseline, PyTorch's own implementation (no swap; the shim still applies).
RMSNORM_SWAP=1 (default): ours, op_db['nn.functional.rms_norm'].op = rmsnorm_kernel.module.rms_norm
and module_db[torch.nn.RMSNorm].module_cls = rmsnorm_kernel.module.RMSNorm.

Version-skew shim (no edit to the test files): the test files (cyyever/pytorch fork of
pytorch/pytorch, newer than the installed torch 2.13.0) import
`torch.testing._internal.common_utils.HardwareClassification` and set a class attribute
`hw_classification = HardwareClassification.X`, which the installed common_utils does not have
and never reads. We add a stand-in enum with those members so the files import unchanged.
"""

import enum
import os

import torch
import torch.testing._internal.common_utils as _cu

if not hasattr(_cu, "HardwareClassification"):

    class HardwareClassification(enum.Enum):  # stand-in; only used as a class attribute value
        ACCELERATOR = "accelerator"
        CPU = "cpu"
        GENERIC = "generic"

    _cu.HardwareClassification = HardwareClassification

from torch.testing._internal import common_methods_invocations as _cmi  # noqa: E402
from torch.testing._internal import common_modules as _cm  # noqa: E402

SWAP = os.environ.get("RMSNORM_SWAP", "1") != "0"

_TORCH_RMS_NORM = torch.nn.functional.rms_norm

_op_entries = [op for op in _cmi.op_db if op.name == "nn.functional.rms_norm"]
_mod_entries = [m for m in _cm.module_db if m.module_cls is torch.nn.RMSNorm]
assert len(_op_entries) >= 1, "no nn.functional.rms_norm OpInfo"
assert len(_mod_entries) == 1, "no torch.nn.RMSNorm ModuleInfo"

if SWAP:
    import rmsnorm_kernel
    from rmsnorm_kernel.module import RMSNorm as OurRMSNorm
    from rmsnorm_kernel.module import rms_norm as our_rms_norm

    assert OurRMSNorm is rmsnorm_kernel.RMSNorm and issubclass(OurRMSNorm, torch.nn.RMSNorm)

    for op in _op_entries:
        op.op = our_rms_norm
        # method/inplace variants: torch has none for rms_norm; keep them None.
        assert op.method_variant is None and op.inplace_variant is None, op
        # op.ref (numpy reference_rms_norm), op.aliases (torch.rms_norm, PyTorch's own),
        # op.decomp_aten_name etc. are left as PyTorch's: they are what we are compared with.
    for m in _mod_entries:
        m.module_cls = OurRMSNorm
    # keep test ids identical to the baseline run ("nn_RMSNorm" instead of "RMSNorm")
    _cm.MODULE_CLASS_NAMES[OurRMSNorm] = "nn.RMSNorm"

_ops = [
    (o.name, o.variant_test_name, getattr(o.op, "__module__", "?") + "." + o.op.__name__)
    for o in _op_entries
]
_mods = [(m.name, m.module_cls.__module__ + "." + m.module_cls.__qualname__) for m in _mod_entries]
_backend = __import__("rmsnorm_kernel").BACKEND if SWAP else "torch"
print(f"\n[swap] SWAP={SWAP}; rms_norm OpInfos: {_ops}; RMSNorm ModuleInfo: {_mods}; {_backend}")


def pytest_collection_modifyitems(session, config, items):
    """Re-assert, after collection, that the databases still hold the implementation we expect."""
    for op in _op_entries:
        if SWAP:
            assert op.op.__module__ == "rmsnorm_kernel.module", op.op
            assert op.op is not _TORCH_RMS_NORM
        else:
            assert op.op is _TORCH_RMS_NORM, op.op
    for m in _mod_entries:
        if SWAP:
            assert m.module_cls.__module__ == "rmsnorm_kernel.module", m.module_cls
        else:
            assert m.module_cls is torch.nn.RMSNorm
