"""The one place a training config is checked, before anything is built or written.

:func:`check_train_config` is called by ``train(cfg)`` first, and by ``python -m
rmsnorm_kernel.train`` for every value of a sweep before any job starts. A value that breaks its
rule raises :class:`SettingsError` with one line naming the key, the rule and the value, e.g.
``seed must be an integer in [0, 4294967295] (got 1.5)``; the command exits 2 with that line.

Tolerances are defined once, in ``conf/compare/*.yaml``; code and tests read them from there. A
tolerance that is negative, NaN or not a number would make every verdict meaningless, so it is
refused with an error naming the key (:func:`check_compare_settings`).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The largest seed ``lightning.seed_everything`` (numpy) accepts.
MAX_SEED = 2**32 - 1

#: Keys of the ``compare`` group and what each must be.
TOLERANCES = ("delta_metric_tolerance", "initial_error_tolerance")
NAMES = ("baseline", "metric", "curve")


class SettingsError(ValueError):
    """A setting breaks its rule; the message (one line) names the key, the rule and the value."""


#: Where Hydra's composition errors name the key they refuse (``Could not override 'norm.eps'``,
#: OmegaConf's ``full_key: norm.eps``).
_REFUSED_KEY = re.compile(r"Could not override '([^']+)'|full_key: (\S+)")


def override_culprit(overrides, text: str) -> str | None:
    """The override a Hydra composition error ``text`` is about: the one whose key it names
    (``norm.eps=-1``, not ``norm=triton``, whose key ``norm`` is only a prefix); else the one
    with the longest key found in ``text``; None when none is. Of several overrides of that key
    (``norm=reference norm=trition``), the one whose value ``text`` names, else the last (the
    one Hydra keeps)."""
    keys = {o: o.split("=", 1)[0].lstrip("+~") for o in overrides}
    named = _REFUSED_KEY.search(text)
    if named:
        key = named.group(1) or named.group(2)
        exact = [o for o, k in keys.items() if k == key]
        if exact:
            return _of_same_key(exact, text)
    found = [o for o, k in keys.items() if k and k in text]
    if not found:
        return None
    key = keys[max(found, key=lambda o: len(keys[o]))]
    return _of_same_key([o for o in found if keys[o] == key], text)


def _of_same_key(candidates: list[str], text: str) -> str:
    """Of overrides of one key, the one whose (non-empty) value ``text`` names, else the last."""
    valued = [o for o in candidates if (v := o.partition("=")[2]) and v in text]
    return (valued or candidates)[-1]


def _get(cfg: Any, key: str) -> tuple[bool, Any]:
    """``(present, value)`` of a dotted ``key`` in a DictConfig or mapping (never resolves a
    missing key into an error)."""
    node = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) and not hasattr(node, "keys"):
            return False, None
        if part not in node:
            return False, None
        node = node[part]
    return True, node


def _integer(cfg: Any, key: str, low: int, high: int | None = None, optional: bool = True) -> None:
    present, value = _get(cfg, key)
    if not present and optional:
        return
    rule = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        raise SettingsError(f"{key} must be {rule} (got {value!r})")


def _positive_number(cfg: Any, key: str) -> None:
    present, value = _get(cfg, key)
    if not present:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{key} must be a finite number > 0 (got {value!r})")


def _path(cfg: Any, key: str) -> Path:
    present, value = _get(cfg, key)
    if not present or not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise SettingsError(f"{key} must be a non-empty directory path (got {value!r})")
    return Path(value)


def check_writable_dir(path: Path, key: str) -> None:
    """``path`` can hold new files: a directory (or creatable as one: no part of it is a file)
    that accepts a small file. The probe file is removed at once; nothing else is created.

    Raises :class:`SettingsError` naming ``key`` and the path: a file in the way, a read-only
    directory or file system, a full disk.
    """
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is a file" if probe == path else f"lies under a file ({probe})"
        raise SettingsError(f"{key} must be a writable directory; {path} {where}")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".write_probe") as f:
            f.write(b"x")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise SettingsError(
            f"{key} must be a writable directory; {path} is not ({e.strerror or e})"
        ) from e


def check_compile_switches(compile: object, inductor_fusion: object) -> None:
    """``model.compile`` / ``model.inductor_fusion``: booleans, and the pass needs the compile
    (checked here for a config, and by the LightningModule built without one)."""
    for key, value in (("compile", compile), ("inductor_fusion", inductor_fusion)):
        if not isinstance(value, bool):
            raise SettingsError(f"model.{key} must be true or false (got {value!r})")
    if inductor_fusion and not compile:
        raise SettingsError(
            "model.inductor_fusion=true needs model.compile=true: the pass rewrites compiled "
            "graphs only"
        )


def _compile_switches(cfg: Any) -> None:
    values = {}
    for key in ("compile", "inductor_fusion"):
        present, value = _get(cfg, f"model.{key}")
        values[key] = value if present else False
    check_compile_switches(**values)


#: The config nodes built with ``instantiate`` whose arguments :func:`check_target_arguments`
#: checks (``model.net`` has its builder's own rules, :func:`check_net`); ``callbacks`` and
#: ``logger``: every entry.
TARGET_NODES = ("dataset", "model", "model.optimizer", "trainer", "logger")


def _target_nodes(cfg: Any) -> list[tuple[str, Any]]:
    nodes = []
    for key in TARGET_NODES:
        present, node = _get(cfg, key)
        if present and hasattr(node, "keys") and "_target_" in node:
            nodes.append((key, node))
    present, callbacks = _get(cfg, "callbacks")
    if present and hasattr(callbacks, "items"):
        nodes += [(f"callbacks.{k}", v) for k, v in callbacks.items() if hasattr(v, "keys")]
    return [(k, n) for k, n in nodes if "_target_" in n]


def check_target_arguments(cfg: Any) -> None:
    """Each ``_target_`` node's keys must be arguments its target takes: an added key with a typo
    (``+trainer.max_step=5``, ``+model.optimizer.weight_decy=0.1``) was a TypeError after Hydra
    had made the run dir (or the first TensorBoard file). Targets taking ``**kwargs`` accept any
    key, and a target that does not import is left to ``instantiate``'s own error."""
    import difflib

    from hydra.utils import get_object

    for key, node in _target_nodes(cfg):
        try:
            params = _accepted(get_object(str(node["_target_"])))
        except Exception:  # noqa: BLE001 - not importable / no signature: instantiate says why
            continue
        if params is None:
            continue
        for name in node:
            if str(name).startswith("_") or name in params:
                continue
            close = difflib.get_close_matches(str(name), [p for p in params if p != "self"], 1)
            hint = f"; did you mean {key}.{close[0]}?" if close else ""
            raise SettingsError(
                f"{key}.{name}: {node['_target_']} takes no argument {name!r}{hint}"
            )


def _accepted(target: Any) -> set[str] | None:
    """The keyword arguments ``target`` takes; None when it takes any. A class whose
    ``__init__`` passes ``**kwargs`` on to its base's (``super().__init__(**splits)``) takes its
    own and the base's, up the MRO to the first ``__init__`` without ``**kwargs``."""
    import inspect

    classes = (
        [c for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else []
    )
    functions = [vars(c)["__init__"] for c in classes] or [target]
    accepted: set[str] = set()
    for function in functions:
        if function is object.__init__:
            return None
        params = inspect.signature(function).parameters
        accepted |= {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return accepted - {"self"}
    return None


#: The language model's throughput callback (conf/callbacks/lm.yaml).
THROUGHPUT = "rmsnorm_kernel.experiment.lm.callbacks.Throughput"


def _throughput_warmup(cfg: Any) -> None:
    """The throughput callback times the steps after its ``warmup_steps``: a step budget that
    leaves none fails the run at its end, after training and the export."""
    present, node = _get(cfg, "callbacks.throughput")
    if not present or not hasattr(node, "get") or node.get("_target_") != THROUGHPUT:
        return
    _integer(cfg, "callbacks.throughput.warmup_steps", 0)
    present, max_steps = _get(cfg, "trainer.max_steps")
    warmup = node.get("warmup_steps", 0)
    if present and isinstance(max_steps, int) and max_steps != -1 and max_steps <= warmup:
        raise SettingsError(
            f"trainer.max_steps must be greater than callbacks.throughput.warmup_steps "
            f"({warmup}): the throughput is the median of the steps after the warm-up (got "
            f"{max_steps}); raise it, or set callbacks.throughput.warmup_steps=0"
        )


#: The command set's config groups (``conf/cli.yaml``), which share ``conf/`` with training's and
#: so show in ``train --help``: ``{group: the commands that read it}``.
COMMAND_SET_GROUPS = {
    "benchmark": "python -m rmsnorm_kernel.cli bench",
    "campaign": "python -m rmsnorm_kernel.cli check-forward / check-backward / check-weight",
    "exercise": "python -m rmsnorm_kernel.cli exercise",
}


def check_checkpoint_index(directory: Path) -> None:
    """The checkpoint dir's ``index.json``, if any, must be one the export can add to: checked
    before training, not after it (a damaged index used to fail the export at the end)."""
    from ..exports.index import IndexFileError, checked_entries, index_path

    if not index_path(directory).exists():
        return
    try:
        checked_entries(directory)
    except IndexFileError as e:
        raise SettingsError(
            f"paths.checkpoint_dir: {e}; repair or move it (rmsnorm-cli check-checkpoints reads "
            "it) or use another paths.checkpoint_dir"
        ) from None


def _dataset(cfg: Any) -> None:
    """The synthetic datasets' own values (mlp/data.py, lm/data.py), which they would refuse,
    or silently misuse, only once the run dir is written."""
    for key in ("seed", "shuffle_seed"):
        _integer(cfg, f"dataset.{key}", 0, MAX_SEED)
    # (vocab_size and seq_len: the net's check names them, as its sizes' source)
    for key in ("in_features", "out_features", "teacher_hidden"):
        _integer(cfg, f"dataset.{key}", 1)
    present, noise = _get(cfg, "dataset.noise")
    if present:
        ok = isinstance(noise, int | float) and not isinstance(noise, bool)
        if not ok or not math.isfinite(noise) or noise < 0:
            raise SettingsError(f"dataset.noise must be a finite number >= 0 (got {noise!r})")
    present, vocab = _get(cfg, "dataset.vocab_size")
    if present and isinstance(vocab, int) and not isinstance(vocab, bool) and vocab >= 1:
        _integer(cfg, "dataset.successors", 1, vocab)


def _validation_cadence(cfg: Any) -> None:
    """``trainer.val_check_interval`` as Lightning takes it (a step count >= 1, or a fraction of
    an epoch in (0, 1]; 0 used to fail inside the fit loop with a ZeroDivisionError) and
    ``trainer.deterministic`` (true, false, "warn" or null; any other string was taken as
    true)."""
    present, every = _get(cfg, "trainer.val_check_interval")
    if present and every is not None:
        if isinstance(every, bool) or not isinstance(every, int | float):
            ok = False
        elif isinstance(every, int):
            ok = every >= 1
        else:
            ok = 0.0 < every <= 1.0
        if not ok:
            raise SettingsError(
                "trainer.val_check_interval must be null, an integer >= 1 (steps) or a float in "
                f"(0, 1] (a fraction of an epoch) (got {every!r})"
            )
    present, deterministic = _get(cfg, "trainer.deterministic")
    if present and not (deterministic is None or isinstance(deterministic, bool)):
        if deterministic != "warn":
            raise SettingsError(
                f"trainer.deterministic must be true, false, warn or null (got {deterministic!r})"
            )


def check_train_config(
    cfg: Any,
    paths: bool = True,
    run_dir: Path | None = None,
    run_dir_key: str = "paths.output_dir",
    here: bool = True,
) -> None:
    """Every rule of a composed training config (``conf/train.yaml`` and its groups).

    The checkpoint dir must be writable; with ``paths=True`` (``train(cfg)``) the run's output
    dir too, and it must not hold a finished run (:func:`check_run_dir`). ``paths=False``: the
    pre-check, before Hydra has made the run dir: ``run_dir`` (named ``run_dir_key``, e.g.
    ``hydra.run.dir``) is checked the same way when known (a single run), and nothing else is.

    Also, each through the code that would refuse it later: the net's values (its builder's
    rules, :func:`check_net`), what Lightning's Trainer would refuse or silently change on this
    machine (:func:`check_trainer`; ``here=False``, jobs that run on other machines: only what
    holds everywhere), and ``ckpt_path``'s checkpoint (:func:`check_ckpt_path`).

    Raises :class:`SettingsError` with one line naming the key, the rule and the value.
    """
    for group, command in COMMAND_SET_GROUPS.items():
        if _get(cfg, group)[0]:  # ``+benchmark=quick``: would only change the config's hash
            raise SettingsError(
                f"{group} is a command-set config ({command}); training takes none: drop "
                f"+{group}=..."
            )
    _integer(cfg, "seed", 0, MAX_SEED, optional=False)
    for key in ("train", "test"):  # `train=no` is the string "no", which is true
        present, value = _get(cfg, key)
        if present and not isinstance(value, bool):
            raise SettingsError(f"{key} must be true or false (got {value!r})")
    if _get(cfg, "train")[1] is False and _get(cfg, "test")[1] is False:
        raise SettingsError("train and test must not both be false: the run would do nothing")
    present, max_steps = _get(cfg, "trainer.max_steps")
    if present and max_steps != -1:
        _integer(cfg, "trainer.max_steps", 1)
    if present and max_steps == -1:  # then the epoch budget ends training
        _integer(cfg, "trainer.max_epochs", 1, optional=False)
    for key in ("n_train", "n_val", "n_test", "batch_size", "eval_batch_size"):
        _integer(cfg, f"dataset.{key}", 1)
    present, n_train = _get(cfg, "dataset.n_train")
    _, batch = _get(cfg, "dataset.batch_size")
    if present and batch is not None and batch > n_train:
        raise SettingsError(
            f"dataset.batch_size must be <= dataset.n_train ({n_train}): a step takes a full "
            f"batch (got {batch})"
        )
    _dataset(cfg)
    _validation_cadence(cfg)
    _positive_number(cfg, "model.optimizer.lr")
    check_target_arguments(cfg)
    _throughput_warmup(cfg)
    _compile_switches(cfg)
    check_net(cfg)
    check_trainer(cfg, here=here)
    present, ckpt = _get(cfg, "ckpt_path")
    if present and ckpt is not None:
        if not isinstance(ckpt, str) or not (ckpt == "auto" or Path(ckpt).is_file()):
            raise SettingsError(
                "ckpt_path must be null, auto, or an existing last.ckpt / .safetensors file "
                f"(got {ckpt!r})"
            )
        resumes = ckpt == "auto" or not ckpt.endswith(".safetensors")
        if resumes and _get(cfg, "trainer.enable_checkpointing")[1] is False:
            raise SettingsError(
                "ckpt_path resumes from a Lightning last.ckpt, which needs "
                "trainer.enable_checkpointing=true (this config writes none; got "
                f"ckpt_path={ckpt!r})"
            )
    if _get(cfg, "compare")[1] is not None:
        check_compare_settings(cfg["compare"])
    if paths:
        run_dir, run_dir_key = _path(cfg, "paths.output_dir"), "paths.output_dir"
    if run_dir is not None:
        check_writable_dir(Path(run_dir), run_dir_key)
    checkpoint_dir = _path(cfg, "paths.checkpoint_dir")
    check_writable_dir(checkpoint_dir, "paths.checkpoint_dir")
    check_checkpoint_index(checkpoint_dir)
    check_ckpt_path(cfg, run_dir)
    if run_dir is not None:
        check_run_dir(cfg, Path(run_dir), run_dir_key)


#: ``model.net``'s ``_target_`` when the net is built through the builders' allow-list.
BUILD_NET = "rmsnorm_kernel.experiment.core.builders.build_net"


def net_spec(cfg: Any) -> dict[str, Any] | None:
    """The spec ``model.net`` builds (resolved, without Hydra's keys), or None when the net is
    not built through the builders' allow-list."""
    from omegaconf import OmegaConf

    present, net = _get(cfg, "model.net")
    if not present or not hasattr(net, "keys") or net.get("_target_") != BUILD_NET:
        return None
    try:
        plain = OmegaConf.to_container(net, resolve=True) if OmegaConf.is_config(net) else net
    except Exception as e:  # noqa: BLE001 - an interpolation that does not resolve
        raise SettingsError(f"model.net must resolve ({' '.join(str(e).split())})") from e
    return {str(k): v for k, v in dict(plain).items() if not str(k).startswith("_")}


def check_net(cfg: Any) -> None:
    """``model.net``'s values by its builder's own rules (``builders.check_values``, the function
    the builder runs first), without building it; the norm must be buildable here (a missing
    optional package such as liger-kernel is named).

    A value taken from another key (``max_position_embeddings: ${dataset.seq_len}``) says so."""
    from omegaconf import OmegaConf

    from .builders import SpecError, check_values

    spec = net_spec(cfg)
    if spec is None:
        return
    try:
        check_values(spec, field="model.net")
    except SpecError as e:
        message = str(e)
        net = cfg["model"]["net"]
        key = getattr(e, "key", None)
        if key and OmegaConf.is_config(net) and key in net and OmegaConf.is_interpolation(net, key):
            message += f"; set by {OmegaConf.to_container(net, resolve=False)[key]}"
        raise SettingsError(message) from e


#: ``trainer._target_`` values that are Lightning's Trainer (its settings checked by Lightning).
LIGHTNING_TRAINERS = ("lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer")
#: The Trainer arguments Lightning's accelerator connector decides from.
CONNECTOR_KEYS = ("accelerator", "devices", "strategy", "num_nodes", "precision", "plugins")


def _plain(node: Any) -> Any:
    """A trainer setting as the Trainer would get it: ``_target_`` nodes instantiated."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    if OmegaConf.is_dict(node) and "_target_" in node:
        return instantiate(node)
    if OmegaConf.is_list(node):
        return [_plain(v) for v in node]
    return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node


def check_trainer(cfg: Any, here: bool = True) -> None:
    """``trainer.accelerator/devices/strategy/num_nodes/precision/plugins`` as Lightning's Trainer
    would take them on this machine, asked of Lightning itself: ``trainer=ddp``'s process count
    (:mod:`.processes`) and that every rank gets val and test samples, then Lightning's
    accelerator connector (the part of the Trainer that parses them; no Trainer is built, nothing
    is written, no torch flag is set): what it refuses (``trainer.precision=bf17``,
    ``trainer.accelerator=gpu`` without one, ``trainer.devices=0``) and what it would silently
    change (``16-mixed`` on a CPU runs as ``bf16-mixed``). With ``here=False`` (the jobs run on
    other machines) only the precision's spelling is checked.
    """
    present, trainer = _get(cfg, "trainer")
    if not present or not hasattr(trainer, "keys"):
        return
    if trainer.get("_target_") not in LIGHTNING_TRAINERS:
        return
    parts = _lightning_parts()
    if parts is None:
        return
    _convert_precision_to_unified_args, accelerator_connector = parts
    asked = {k: trainer[k] for k in CONNECTOR_KEYS if k in trainer}
    if "precision" in asked:
        try:
            _convert_precision_to_unified_args(asked["precision"])
        except ValueError as e:
            raise SettingsError(
                f"trainer.precision must be a precision Lightning's Trainer accepts (got "
                f"{asked['precision']!r}; Lightning: {' '.join(str(e).split())})"
            ) from e
    if not here:
        return
    from .processes import processes_to_start

    try:
        world = processes_to_start(trainer)
    except SettingsError:
        raise
    except Exception as e:  # noqa: BLE001 - ValueError, Lightning's MisconfigurationException
        raise SettingsError(" ".join(str(e).split())) from e
    check_shards(cfg, world)
    connector, said = _connector(accelerator_connector, asked, spawned=world > 1)
    if "precision" in asked:
        wanted = _convert_precision_to_unified_args(asked["precision"])
        runs = getattr(connector.precision_plugin, "precision", wanted)
        if runs != wanted:
            why = "".join(f" ({' '.join(str(w).split())})" for w in said[:1])
            raise SettingsError(
                f"trainer.precision must be one Lightning runs as asked on "
                f"{type(connector.accelerator).__name__}: it would run {wanted!r} as {runs!r}"
                f"{why}; ask for trainer.precision={runs} (or another) explicitly (got "
                f"{asked['precision']!r})"
            )


class PrecheckSkipped(UserWarning):
    """The pre-check could not ask Lightning (its private parts moved): the Trainer checks its
    settings itself when it is built, after Hydra has made the run dir."""


#: The private Lightning names the trainer check asks (present in Lightning 2.2 to 2.6).
_LIGHTNING_PRIVATE = (
    ("lightning.fabric.connector", "_convert_precision_to_unified_args"),
    ("lightning.pytorch.trainer.connectors.accelerator_connector", "_AcceleratorConnector"),
    ("lightning.pytorch.trainer.connectors.accelerator_connector", "_IS_INTERACTIVE"),
)


def _lightning_parts() -> tuple[Any, Any] | None:
    """Lightning's precision parser and accelerator-connector module, or None, with a
    :class:`PrecheckSkipped` warning naming what is missing, when this Lightning lacks them:
    a newer Lightning may move private names, and the run must not fail on that alone."""
    import importlib
    import warnings

    missing = []
    for module, name in _LIGHTNING_PRIVATE:
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{name}")
    if missing:
        import lightning

        warnings.warn(
            f"pre-check: Lightning {lightning.__version__} has no {', '.join(missing)}; "
            "trainer.accelerator/devices/strategy/num_nodes/precision/plugins are left to the "
            "Trainer, which checks them when it is built (after the run dir is made)",
            PrecheckSkipped,
            stacklevel=3,
        )
        return None
    from lightning.fabric.connector import _convert_precision_to_unified_args
    from lightning.pytorch.trainer.connectors import accelerator_connector

    return _convert_precision_to_unified_args, accelerator_connector


def _connector(
    accelerator_connector: Any, asked: dict[str, Any], spawned: bool = False
) -> tuple[Any, list[Warning]]:
    """Lightning's ``_AcceleratorConnector`` built from these Trainer arguments, and the warnings
    it gave; :class:`SettingsError` with Lightning's reason when it refuses them.

    ``spawned``: the Trainer will be built in the processes ``train`` starts itself
    (:mod:`.processes`, fresh interpreters), so the connector is asked as there: not in an
    interactive session, whose refusal of Lightning's own DDP launchers does not apply."""
    import logging
    import warnings

    disabled = logging.root.manager.disable
    logging.disable(logging.INFO)  # "Using bfloat16 Automatic Mixed Precision": the Trainer says it
    interactive = accelerator_connector._IS_INTERACTIVE
    if spawned:
        accelerator_connector._IS_INTERACTIVE = False
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            connector = accelerator_connector._AcceleratorConnector(
                **{k: _plain(v) for k, v in asked.items()}
            )
    except Exception as e:  # noqa: BLE001 - Lightning's own refusals (ValueError, Misconfiguration...)
        shown = ", ".join(
            f"trainer.{k}={_plain_repr(v)}" for k, v in asked.items() if k != "plugins"
        )
        raise SettingsError(
            "trainer.accelerator, devices, strategy, num_nodes and precision must be a combination "
            f"Lightning's Trainer accepts on this machine (got {shown}; Lightning: "
            f"{' '.join(str(e).split())})"
        ) from e
    finally:
        logging.disable(disabled)
        accelerator_connector._IS_INTERACTIVE = interactive
    return connector, [w.message for w in said]


def _plain_repr(value: Any) -> str:
    from omegaconf import OmegaConf

    return repr(OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)


def check_shards(cfg: Any, world: int) -> None:
    """Under DDP every rank evaluates its own share of the val and test splits; Lightning's
    sampler needs at least one sequence per rank (it fails in one rank, which hung NCCL ranks)."""
    if world < 2:
        return
    for key in ("n_val", "n_test"):
        _, n = _get(cfg, f"dataset.{key}")
        if isinstance(n, int) and n < world:
            raise SettingsError(
                f"dataset.{key} must be >= the number of processes ({world}) under DDP: every "
                f"rank evaluates at least one sample (got {n})"
            )


def check_ckpt_path(cfg: Any, run_dir: Path | None = None) -> None:
    """``ckpt_path``'s checkpoint, read before anything is built or written.

    A ``.safetensors`` warm start must be an experiment export holding exactly this config's
    net's weights (names, dtypes, shapes; its header only is read). A ``last.ckpt`` (``auto``:
    the one it finds, ``run_dir`` left out as ``train`` leaves its own dir out) must be this
    branch's and config's, with steps left to train (:func:`.identity.check_resume`).
    """
    present, ckpt = _get(cfg, "ckpt_path")
    if not present or not isinstance(ckpt, str):
        return
    if ckpt.endswith(".safetensors"):
        from ..exports.checkpoint import CheckpointError, check_warm_start

        spec = net_spec(cfg)
        if spec is None:
            return
        try:
            check_warm_start(Path(ckpt), spec, field="model.net")
        except CheckpointError as e:
            raise SettingsError(f"ckpt_path: {' '.join(str(e).split())}") from e
        return
    from .identity import check_resume, resume_source

    path = resume_source(cfg, exclude=run_dir)
    if path is not None:
        check_resume(cfg, path)


#: What a finished run leaves in its run dir.
FINISHED = "metrics.json"


def check_run_dir(cfg: Any, run_dir: Path, key: str = "paths.output_dir") -> None:
    """A run's dir must not hold a finished run (its ``metrics.json``) or a stopped one's
    ``last.ckpt``: training into it would overwrite that run's results or its only saved
    progress. Allowed: a new dir (or one holding neither), and a stopped or finished run's when
    ``ckpt_path`` is that run's own ``last.ckpt`` (resuming it, or training it on, explicitly).

    Raises :class:`SettingsError` naming ``key`` (``hydra.run.dir`` or ``paths.output_dir``)."""
    run_dir = Path(run_dir)
    own = run_dir / "lightning_checkpoints" / "last.ckpt"
    _, ckpt = _get(cfg, "ckpt_path")
    resumes_own = (
        isinstance(ckpt, str)
        and ckpt != "auto"
        and own.is_file()
        and Path(ckpt).resolve() == own.resolve()
    )
    if not (run_dir / FINISHED).exists():
        if own.is_file() and not resumes_own:
            # A stopped run's only copy of its progress: this run would write over it (another
            # branch's, or a fresh start of the same one), and its printed resume command fail.
            raise SettingsError(
                f"{key}: {run_dir} holds a stopped run's {own.name}, which this run would "
                f"overwrite: resume it with ckpt_path={own}, or choose another dir"
            )
        return
    if resumes_own:
        return
    on = f", or train that run on with ckpt_path={own}" if own.is_file() else ""
    raise SettingsError(
        f"{key} must be a new directory or a stopped run's; {run_dir} already holds a finished "
        f"run ({FINISHED}): choose another dir{on}"
    )


def check_compare_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"baseline", "metric", "curve", "delta_metric_tolerance", "initial_error_tolerance"}``.

    Raises :class:`SettingsError` naming ``compare.<key>`` when a key is missing, a name is not a
    non-empty string, or a tolerance is not a finite number >= 0.
    """
    out: dict[str, Any] = {}
    for key in NAMES:
        value = settings.get(key) if key in settings else None
        if not isinstance(value, str) or not value:
            raise SettingsError(f"compare.{key} must be a non-empty string (got {value!r})")
        out[key] = value
    for key in TOLERANCES:
        value = settings.get(key) if key in settings else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingsError(f"compare.{key} must be a number (got {value!r})")
        if not math.isfinite(value) or value < 0:
            raise SettingsError(f"compare.{key} must be a finite number >= 0 (got {value!r})")
        out[key] = float(value)
    return out
