"""DTensor inputs (tensor and sequence parallelism): each rank normalises its local rows.

An RMSNorm reduces over the normalised (last) dim only. A DTensor sharded over any other dim
(torchtitan's ``SequenceParallel`` norms take ``Shard(1)``: a slice of the sequence) or
replicated holds whole rows on every rank, so each rank runs the kernels on its local tensor and
the outputs carry x's placements. The weight is replicated; its gradient is ``Partial(sum)`` over
the mesh dims x is sharded over (each rank's rows give a part of the sum) and ``Replicate``
elsewhere, which is what ``F.rms_norm``'s own sharding rule gives.

Refused before any launch, naming the rule: x or residual sharded over the normalised dim, or
``Partial`` (a row would need other ranks' values: redistribute first), a weight that is not
replicated, tensors on different meshes, and DTensors mixed with plain tensors (as DTensor itself
refuses). No communication happens here.

The check costs one dictionary lookup when ``torch.distributed.tensor`` was never imported: then
no tensor can be a DTensor.
"""

from __future__ import annotations

import sys

import torch

from .contract import ContractTypeError, ContractValueError

_MODULE = "torch.distributed.tensor"


def involved(*tensors) -> bool:
    """Whether any of ``tensors`` (tensors or None) is a DTensor."""
    module = sys.modules.get(_MODULE)
    if module is None:
        return False
    dtensor = module.DTensor  # (a loop, not any() over a generator: this is the hot path)
    for t in tensors:
        if isinstance(t, dtensor):
            return True
    return False


def _contiguous_stride(shape) -> tuple[int, ...]:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(size, 1)
    return tuple(reversed(stride))


def _check(x, weight, residual, normalized_ndim: int) -> None:
    module = sys.modules[_MODULE]
    dtensor, shard, replicate = module.DTensor, module.Shard, module.Replicate
    named = {"x": x, "weight": weight, "residual": residual}
    plain = [name for name, t in named.items() if t is not None and not isinstance(t, dtensor)]
    if plain:
        raise ContractTypeError(
            f"x, weight and residual must all be DTensors or all plain tensors (got DTensor and "
            f"plain {', '.join(plain)}): distribute the plain ones on x's mesh"
        )
    for name, t in named.items():
        if t is not None and t.device_mesh != x.device_mesh:
            raise ContractValueError(f"{name} must be on x's device mesh (got another mesh)")
    first_normalised = x.dim() - normalized_ndim
    for name, t in (("x", x), ("residual", residual)):
        if t is None:
            continue
        for mesh_dim, p in enumerate(t.placements):
            if isinstance(p, shard) and p.dim % t.dim() >= first_normalised:
                raise ContractValueError(
                    f"{name} must not be sharded over the normalised dims (got {p} on mesh dim "
                    f"{mesh_dim}): a row would span ranks; redistribute it to Replicate there"
                )
            if not isinstance(p, shard | replicate):
                raise ContractValueError(
                    f"{name} must be sharded over the leading dims or replicated (got {p} on mesh "
                    f"dim {mesh_dim}): redistribute it to Shard or Replicate first"
                )
    if residual is not None and tuple(residual.placements) != tuple(x.placements):
        raise ContractValueError(
            f"residual must have x's placements {tuple(x.placements)} "
            f"(got {tuple(residual.placements)})"
        )
    if weight is not None and not all(isinstance(p, replicate) for p in weight.placements):
        raise ContractValueError(
            f"weight must be replicated on every mesh dim (got {tuple(weight.placements)})"
        )


def local_call(fn, x, weight, residual, normalized_ndim: int = 1):
    """``fn(x_local, weight_local, residual_local)`` -> its output(s) as DTensors with x's mesh,
    placements and global shape. ``normalized_ndim``: trailing dims normalised over."""
    _check(x, weight, residual, normalized_ndim)
    module = sys.modules[_MODULE]
    mesh, placements = x.device_mesh, tuple(x.placements)
    w_grad = tuple(
        module.Partial() if isinstance(p, module.Shard) else module.Replicate() for p in placements
    )
    out = fn(
        x.to_local(),
        None if weight is None else weight.to_local(grad_placements=w_grad),
        None if residual is None else residual.to_local(),
    )
    stride = _contiguous_stride(x.shape)

    def wrap(t: torch.Tensor):
        return module.DTensor.from_local(
            t, mesh, placements, run_check=False, shape=x.shape, stride=stride
        )

    return tuple(wrap(t) for t in out) if isinstance(out, tuple) else wrap(out)
