"""Exported weights: one safetensors file per run that can check its own reload, and runs no code.

A file holds the net's ``state_dict`` plus two reserved tensors, the test inputs and the
predictions the trained net made on them::

    fc1.weight, fc1.bias, norm.weight, fc2.weight, fc2.bias   the weights (MLP)
    check.test_inputs       (n_test, in_features)  float32
    check.test_predictions  (n_test, out_features) float32

and string metadata, every field checked on load against a fixed rule (unknown fields refused):

    format       exactly FORMAT
    net          JSON spec: plain constructor arguments, {"builder": "mlp", ..., "norm": "triton"}
    device       the device type that made the predictions (cpu, cuda, ...)
    norm         a registered norm name (the spec's own ``norm`` when it has one)
    seed         the run's random seed, a decimal integer
    config_hash  12 hex digits: the run's resolved config (``run.config_hash``)

:func:`verify_checkpoint` rebuilds the net through the allow-list of ``builders`` (never by a
name imported from the file), loads the weights and requires the recomputed predictions to be
bitwise identical to the stored ones. Predictions are only bitwise-reproducible on the device
type that made them, so verification runs there (and refuses otherwise).

Nothing is sized from the metadata before it is compared with the file: :func:`load_checkpoint`
reads the safetensors header (names, dtypes, shapes; no tensor data), builds the described net on
the ``meta`` device (no memory) and refuses any weight whose dtype or shape differs from the
file's, so a small file claiming a huge net is refused in milliseconds. The ``net`` field may nest
at most :data:`MAX_NET_DEPTH` levels. Files are written with their metadata keys sorted, so the
same weights and metadata always give the same bytes (and sha256).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from ..core.builders import SpecError, build_from_spec, check_spec, resolve_norm

FORMAT = "rmsnorm_kernel.experiment.checkpoint/2"
INPUTS = "check.test_inputs"
PREDICTIONS = "check.test_predictions"
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")
METADATA_FIELDS = ("format", "net", "device", "norm", "seed", "config_hash")
_HASH = re.compile(r"[0-9a-f]{12}")
_SEED = re.compile(r"-?[0-9]{1,20}")
#: How deep the ``net`` field's JSON may nest (a spec is a flat object of plain arguments).
MAX_NET_DEPTH = 16
#: safetensors' dtype names (the header's ``dtype``) of the dtypes a net's state_dict holds.
_DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable (e.g. truncated) or does not match what it claims."""


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bytes (stricter than ``==``: tells -0.0 from 0.0, NaN equals NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a_bytes = a.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    b_bytes = b.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(a_bytes, b_bytes)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` in float64 (0.0 for empty tensors); inf when shapes differ."""
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    return (a.detach().double().cpu() - b.detach().double().cpu()).abs().max().item()


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@torch.no_grad()
def predict(net: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """``inputs (n, in)`` -> ``(n, out)`` in eval mode, one batch, on the net's device."""
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    out = net(inputs.to(device))
    net.train(was_training)
    return out


def make_metadata(spec: Mapping[str, Any], norm: str, seed: int, config_hash: str, device: str):
    """The metadata dict of a new file, checked by the same rules a reader applies."""
    meta = {
        "format": FORMAT,
        "net": json.dumps(dict(spec), sort_keys=True),
        "device": str(device),
        "norm": str(norm),
        "seed": str(int(seed)),
        "config_hash": str(config_hash),
    }
    check_metadata(meta)
    return meta


def check_metadata(metadata: Mapping[str, str], where: str = "metadata") -> dict[str, Any]:
    """Every field against its rule; returns ``{"spec", "device", "norm", "seed", "config_hash"}``.

    Raises :class:`CheckpointError` naming the field, what it must be and what it holds. Nothing
    in ``metadata`` is imported or called: names only select entries of the builders' allow-lists.
    """

    def bad(field: str, rule: str) -> CheckpointError:
        return CheckpointError(
            f"{where} field {field!r} {rule} (got {_short(metadata.get(field))})"
        )

    unknown = sorted(set(metadata) - set(METADATA_FIELDS))
    if unknown:
        raise CheckpointError(f"{where}: unknown field(s) {unknown}; allowed: {METADATA_FIELDS}")
    missing = [k for k in METADATA_FIELDS if k not in metadata]
    if missing:
        raise CheckpointError(
            f"{where}: not an experiment checkpoint (missing metadata field(s) {missing}; "
            f"expected format {FORMAT!r})"
        )
    if metadata["format"] != FORMAT:
        raise bad("format", f"must be {FORMAT!r} (not an experiment checkpoint of this version)")
    try:
        spec = json.loads(metadata["net"])
    except json.JSONDecodeError as e:
        raise bad("net", f"must be a JSON object ({e})") from e
    except RecursionError as e:  # the parser's own limit (~1000 levels)
        raise bad(
            "net", f"must nest at most {MAX_NET_DEPTH} levels (nests too deep to parse)"
        ) from e
    depth = _depth(spec)
    if depth > MAX_NET_DEPTH:
        raise bad("net", f"must nest at most {MAX_NET_DEPTH} levels (nests {depth})")
    try:
        check_spec(spec, field=f"{where} field 'net'")
    except SpecError as e:
        raise CheckpointError(str(e)) from e
    if metadata["device"] not in DEVICE_TYPES:
        raise bad("device", f"must be one of {DEVICE_TYPES}")
    try:
        resolve_norm(metadata["norm"], field=f"{where} field 'norm'")
    except SpecError as e:
        raise CheckpointError(str(e)) from e
    if "norm" in spec and spec["norm"] != metadata["norm"]:
        raise bad("norm", f"must equal the net's norm {spec['norm']!r}")
    if not _SEED.fullmatch(metadata["seed"]):
        raise bad("seed", "must be a decimal integer")
    if not _HASH.fullmatch(metadata["config_hash"]):
        raise bad("config_hash", "must be 12 lowercase hex digits")
    return {
        "spec": spec,
        "device": metadata["device"],
        "norm": metadata["norm"],
        "seed": int(metadata["seed"]),
        "config_hash": metadata["config_hash"],
    }


def _short(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters (a crafted field may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _depth(value: Any) -> int:
    """How many levels of lists/objects ``value`` nests (0 for a scalar), without recursion.

    Stops counting past :data:`MAX_NET_DEPTH` (that is enough to refuse).
    """
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level + 1)
            if deepest > MAX_NET_DEPTH:
                return deepest
            stack.extend((child, level + 1) for child in item)
    return deepest


def sort_metadata(path: Path) -> None:
    """Rewrite ``path``'s safetensors header in place with its metadata keys sorted.

    safetensors keeps metadata in a hash map whose order changes from one call to the next, so
    two files of the same weights and metadata would differ in bytes (and sha256). The tensor
    entries are already in a fixed order; only ``__metadata__`` is reordered, and the header keeps
    its length (its padding absorbs any difference), so the data offsets stay valid.
    """
    with open(path, "r+b") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        meta = header.pop("__metadata__", None)
        if meta is None:
            return
        ordered = {"__metadata__": dict(sorted(meta.items())), **header}
        text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
        if len(text) > size:
            raise CheckpointError(
                f"{path}: sorted header is {len(text)} bytes, longer than the {size} written"
            )
        f.seek(8)
        f.write(text + b" " * (size - len(text)))


def write_checkpoint(
    path: Path, net: nn.Module, test_inputs: torch.Tensor, metadata: Mapping[str, str]
) -> torch.Tensor:
    """Write ``net``'s weights, the test inputs and its predictions on them to ``path``.

    ``metadata`` comes from :func:`make_metadata` (its ``device`` is replaced by the device the
    predictions were made on). Returns the predictions ``(n_test, out)`` on the net's device.
    """
    predictions = predict(net, test_inputs)
    tensors = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    tensors[INPUTS] = test_inputs.detach().cpu().contiguous()
    tensors[PREDICTIONS] = predictions.cpu().contiguous()
    meta = {**metadata, "device": predictions.device.type}
    check_metadata(meta, where=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=meta)
    sort_metadata(path)
    return predictions


def read_header(path: Path) -> tuple[dict[str, str], dict[str, tuple[str, tuple[int, ...]]]]:
    """``(raw metadata, {tensor name: (dtype name, shape)})`` of ``path``; reads no tensor data."""
    path = Path(path)
    _check_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = dict(f.metadata() or {})
            header = {}
            for name in f.keys():
                piece = f.get_slice(name)
                header[name] = (piece.get_dtype(), tuple(piece.get_shape()))
    except Exception as e:  # safetensors reports truncation as several error types
        if _torch_save_file(path):
            raise CheckpointError(
                f"{path}: a torch.save file (a Lightning last.ckpt?), not an exported "
                "safetensors checkpoint: exports are the checkpoints/*.safetensors files; a "
                "last.ckpt resumes training with ckpt_path=<it>"
            ) from e
        raise CheckpointError(
            f"{path}: unreadable safetensors file, truncated or corrupt ({type(e).__name__}: {e})"
        ) from e
    return raw, header


def _check_file(path: Path) -> None:
    """:class:`CheckpointError` for a path that is not a file: missing, or a directory."""
    if path.is_dir():
        raise CheckpointError(
            f"{path} is a directory, not a checkpoint file: pass one .safetensors file, or the "
            "folder holding index.json as --root to check every export listed there"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")


def _torch_save_file(path: Path) -> bool:
    """Whether ``path`` starts as ``torch.save`` files do (a zip archive, or a pickle)."""
    from ..core.identity import TORCH_SAVE_MAGIC  # (core imports this module at load)

    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(TORCH_SAVE_MAGIC)


def expected_weights(spec: Mapping[str, Any], field: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype name, shape)}`` of the ``state_dict`` of the net ``spec`` describes, built
    on the ``meta`` device (shapes only, no memory); :class:`CheckpointError` naming ``field`` if
    ``spec`` describes no net."""
    try:
        with torch.device("meta"):
            skeleton = build_from_spec(spec, field=field)
        return {
            name: (_DTYPE_NAMES.get(value.dtype, str(value.dtype)), tuple(value.shape))
            for name, value in skeleton.state_dict().items()
        }
    except SpecError as e:
        raise CheckpointError(str(e)) from e
    except Exception as e:  # a builder's own argument checks
        raise CheckpointError(f"{field} does not describe a net ({type(e).__name__}: {e})") from e


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return f"[{shown}{f' and {len(names) - limit} more' if len(names) > limit else ''}]"


def check_warm_start(path: Path, spec: Mapping[str, Any], field: str = "model.net") -> None:
    """``path`` can start the net ``spec`` describes (``ckpt_path=<file>.safetensors``): an
    experiment export (its metadata checked) holding exactly that net's weights, same names,
    dtypes and shapes. Reads the file's header only; the net is built on the ``meta`` device.

    Raises :class:`CheckpointError` naming the file and what is wrong: unreadable or corrupt, not
    an experiment export, missing or unexpected weights, a tensor whose dtype or shape differs.
    """
    path = Path(path)
    raw, header = read_header(path)
    check_metadata(raw, where=str(path))
    names, tensor = _weight_mismatch(expected_weights(spec, field), header)
    prefix = f"{path}: its weights are not those of this config's net ({field}):"
    if names is not None:
        raise CheckpointError(f"{prefix} missing {_names(names[0])}, unexpected {_names(names[1])}")
    if tensor is not None:
        name, stored, (dtype, shape) = tensor
        raise CheckpointError(
            f"{prefix} tensor {name!r} is {stored[0]} {list(stored[1])} in the file, the net "
            f"needs {dtype} {list(shape)}"
        )


def _weight_mismatch(expected: Mapping[str, Any], header: Mapping[str, Any]) -> tuple[Any, Any]:
    """How a file's weights (``header`` without the reserved tensors) differ from ``expected``
    (name -> (dtype, shape)): ``((missing, unexpected), None)`` when the names differ, ``(None,
    (name, stored, expected))`` for the first tensor whose dtype or shape differs, else ``(None,
    None)``."""
    stored = {k: v for k, v in header.items() if k not in (INPUTS, PREDICTIONS)}
    missing, unexpected = sorted(set(expected) - set(stored)), sorted(set(stored) - set(expected))
    if missing or unexpected:
        return (missing, unexpected), None
    for name, want in expected.items():
        if stored[name] != want:
            return None, (name, stored[name], want)
    return None, None


def check_shapes(
    path: Path, spec: Mapping[str, Any], header: Mapping[str, tuple[str, tuple[int, ...]]]
) -> None:
    """The weights ``spec`` describes must have exactly the dtypes and shapes in the file's header.

    The net is built on the ``meta`` device (shapes only, no memory), so a spec claiming sizes the
    file does not hold is refused before anything is allocated. Also requires the reserved
    tensors, with as many predictions as test inputs.
    """
    for key in (INPUTS, PREDICTIONS):
        if key not in header:
            raise CheckpointError(f"{path}: missing tensor {key!r}")
    inputs, predictions = header[INPUTS][1], header[PREDICTIONS][1]
    if not inputs or not predictions or inputs[0] != predictions[0]:
        raise CheckpointError(
            f"{path}: tensor {PREDICTIONS!r} {list(predictions)} must have one row per row of "
            f"{INPUTS!r} {list(inputs)}"
        )
    names, tensor = _weight_mismatch(expected_weights(spec, f"{path} field 'net'"), header)
    if names is not None:
        raise CheckpointError(
            f"{path}: weights do not match the net it describes (missing {names[0]}, unexpected "
            f"{names[1]}); refused before building it"
        )
    if tensor is not None:
        name, stored, (dtype, shape) = tensor
        raise CheckpointError(
            f"{path}: weights do not match the net it describes: tensor {name!r} is "
            f"{stored[0]} {list(stored[1])} in the file, field 'net' needs {dtype} "
            f"{list(shape)}; refused before building it"
        )


def load_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, checked metadata)`` of ``path``; :class:`CheckpointError` if it is unusable.

    The metadata and the header's shapes are checked (:func:`check_shapes`) before any tensor is
    read or any net is built.
    """
    path = Path(path)
    raw, header = read_header(path)
    metadata = check_metadata(raw, where=str(path))
    check_shapes(path, metadata["spec"], header)
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:
        raise CheckpointError(
            f"{path}: unreadable safetensors file, truncated or corrupt ({type(e).__name__}: {e})"
        ) from e
    return tensors, metadata


def resolve_device(recorded: str, device: str | None, path: Path | None = None) -> torch.device:
    """The device to verify on: ``device`` if given, else the one that made the predictions.

    With no CUDA here for a file made on cuda, the error gives the command that compares on the
    CPU anyway (for ``path``).
    """
    if device is not None:
        try:
            chosen = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise CheckpointError(
                f"device must be a torch device such as cpu (got {device!r})"
            ) from e
        if chosen.type == "cuda" and not torch.cuda.is_available():
            raise CheckpointError(f"device {device!r}: no CUDA here")
        return chosen
    if recorded == "cuda" and not torch.cuda.is_available():
        command = "python -m rmsnorm_kernel.cli check-checkpoints --ckpt "
        command += shlex.quote(str(path)) if path is not None else "FILE"
        raise CheckpointError(
            "predictions were made on cuda and bitwise reproduction needs the same device type; "
            "no CUDA here: verify on a CUDA machine, or compare on the CPU anyway with "
            f"`{command} --device cpu` (other kernels: the predictions may differ in the last "
            "bits, and the check then fails showing by how much)"
        )
    return torch.device(recorded)


def verify_checkpoint(
    path: Path,
    device: str | None = None,
    sha256: str | None = None,
    trained: nn.Module | None = None,
) -> dict[str, Any]:
    """Rebuild the net from ``path``, reload its weights, and require bitwise-equal predictions.

    Args:
        path: the ``.safetensors`` file.
        device: where to rebuild (default: the device type that made the stored predictions).
        sha256: when given, the file's sha256 must equal it (e.g. from ``checkpoints/index.json``).
        trained: when given (the export callback passes the net it just saved), every reloaded
            tensor must also be bitwise equal to this net's.

    Returns:
        ``{"path", "norm", "seed", "config_hash", "device", "tensors", "sha256",
        "reload_tensor_max_diff", "reload_max_diff"}``; raises :class:`CheckpointError` naming
        the file on any mismatch.
    """
    path = Path(path)
    _check_file(path)
    digest = sha256_of(path)  # first: a file that is not the recorded one is not even parsed
    if sha256 is not None and digest != sha256:
        raise CheckpointError(f"{path}: sha256 {digest} differs from the recorded {sha256}")
    tensors, metadata = load_checkpoint(path)
    try:
        target = resolve_device(metadata["device"], device, path)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from e
    weights = {k: v for k, v in tensors.items() if k not in (INPUTS, PREDICTIONS)}
    try:
        net = build_from_spec(metadata["spec"]).to(target)
        net.load_state_dict(weights, strict=True)
    except Exception as e:  # missing/unexpected keys, wrong shapes
        raise CheckpointError(
            f"{path}: weights do not match the net it describes ({type(e).__name__}: {e})"
        ) from e
    for name, value in net.state_dict().items():
        if not bitwise_equal(value, weights[name]):
            raise CheckpointError(f"{path}: tensor {name!r} changed on reload")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            # NaN reloads as NaN, bit for bit: a diverged run's file must not pass as a result
            raise CheckpointError(f"{path}: tensor {name!r} holds NaN or inf (a diverged run)")
    tensor_diff = 0.0
    if trained is not None:
        reference = trained.state_dict()
        if reference.keys() != weights.keys():
            raise CheckpointError(f"{path}: keys {sorted(weights)} != trained {sorted(reference)}")
        tensor_diff = max((max_abs_diff(reference[k], weights[k]) for k in weights), default=0.0)
        changed = [k for k in weights if not bitwise_equal(reference[k], weights[k])]
        if changed:
            raise CheckpointError(f"{path}: tensors {changed} differ from the trained net's")
    # A fresh copy: a tensor read from the file sits wherever the header put it (8-byte aligned),
    # and CPU matmuls may round differently on unaligned inputs (seen: 6e-8 on a 5 x 4 input).
    predictions = predict(net, tensors[INPUTS].clone())
    stored = tensors[PREDICTIONS]
    diff = max_abs_diff(predictions, stored)
    if not bitwise_equal(predictions.cpu(), stored):
        raise CheckpointError(
            f"{path}: reloaded predictions differ from the stored ones "
            f"(max abs diff {diff:.3g}, expected 0 bitwise)"
        )
    return {
        "path": str(path),
        "norm": metadata["norm"],
        "seed": metadata["seed"],
        "config_hash": metadata["config_hash"],
        "device": target.type,
        "tensors": len(weights),
        "sha256": digest,
        "reload_tensor_max_diff": tensor_diff,
        "reload_max_diff": diff,
    }


def unique_path(directory: Path, stem: str, listed: Collection[str] = ()) -> Path:
    """``directory/stem.safetensors``, or ``stem.v2``, ``stem.v3``, ... when taken: a file of
    that name exists, or ``listed`` (the names ``index.json`` lists) holds it. A listed name
    whose file was deleted stays taken, so an index entry is never replaced.

    Call it under the index lock (``index.locked``) and rename into the name before releasing:
    two jobs then never pick the same name.
    """
    path = directory / f"{stem}.safetensors"
    version = 1
    while path.exists() or path.name in listed:
        version += 1
        path = directory / f"{stem}.v{version}.safetensors"
    return path


def publish(tmp: Path, final: Path) -> None:
    """Move a fully written ``tmp`` to ``final``, refusing to replace an existing file."""
    if final.exists():
        raise CheckpointError(f"{final} exists: refusing to overwrite it")
    os.replace(tmp, final)
