"""The main job's entry point: ``python -m rmsnorm_kernel.train [overrides]``.

A thin Hydra shell around :func:`rmsnorm_kernel.experiment.core.run.train`. Examples::

    python -m rmsnorm_kernel.train norm=triton seed=3 trainer.max_steps=50
    python -m rmsnorm_kernel.train --multirun norm=reference,triton      # make train

Before Hydra starts any job, every override is parsed and the config is composed and checked
(:func:`rmsnorm_kernel.experiment.core.settings.check_train_config`) for each value a sweep takes:
the net's values by its builder's rules, the trainer settings by Lightning's own connector,
``ckpt_path``'s checkpoint, and a single run's dir (never a finished run's). A malformed
override, an unknown key or a value that breaks its rule stops the command with one line on
stderr (``error: seed must be an integer in [0, 4294967295] (got 1.5)``) and exit code 2, before
anything is written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from rmsnorm_kernel.experiment.core.callbacks import ExportFailed
from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.experiment.core.settings import (
    COMMAND_SET_GROUPS,
    SettingsError,
    check_train_config,
    override_culprit,
)
from rmsnorm_kernel.paths import CONFIG_DIR, below_root_message, inside_checkout_below_root

log = logging.getLogger(__name__)

#: Exit status of a refused config (as the command set's).
USAGE_EXIT = 2
CONFIG_NAME = "train"


def refuse(message: object) -> SystemExit:
    """Print ``error: <message>`` as one line on stderr; the SystemExit(2) to raise."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
    return SystemExit(USAGE_EXIT)


def _one_line(override: str, error: Exception) -> str:
    text = " ".join(str(error).split())
    if "Could not override" in text or "not in struct" in text:
        key = override.split("=", 1)[0]
        group = key.lstrip("+~").split(".", 1)[0]
        if group in COMMAND_SET_GROUPS:  # listed by train --help (conf/ is shared), not training's
            return (
                f"override {override!r}: {group} is a command-set config "
                f"({COMMAND_SET_GROUPS[group]}); training takes none"
            )
        return f"override {override!r}: no key {key!r} in the config (a new key needs +{override})"
    return f"override {override!r}: {text}"


def _parse_error(text: str) -> str:
    """What Hydra's override parser said, in one line: its reason, without the header and the
    link; a lexer error's caret line becomes the character it points at (``~``, ``$``...)."""
    lines = [
        ln
        for ln in text.splitlines()
        if ln.strip() and not ln.startswith(("See https://", "Error parsing override"))
    ]
    for i, line in enumerate(lines[1:], start=1):
        if set(line.strip()) == {"^"}:  # the caret under the offending character
            above, at = lines[i - 1], line.index("^")
            char = above[at] if at < len(above) else "?"
            return f"{char!r} cannot stand there unquoted; quote the value: key='value'"
    return lines[0].strip() if lines else text.strip()


def _override_sets(overrides: Sequence[str]) -> list[list[str]]:
    """Concrete override lists covering every value of every sweep (each value once, the other
    sweeps at their first value); Hydra's own ``hydra.*`` overrides are left to Hydra, except
    ``hydra.searchpath`` (more config dirs), which every set keeps so their choices compose.

    Raises :class:`SettingsError` for an override that does not parse (``garbage``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    choices: list[list[str]] = []
    searchpath: list[str] = []
    for text in overrides:
        try:
            (parsed,) = parser.parse_overrides([text])
        except OverrideParseException as e:
            raise SettingsError(
                f"override {text!r} must be key=value, +key=value or ~key "
                f"(Hydra: {_parse_error(str(e))})"
            ) from e
        if parsed.is_hydra_override():
            if parsed.get_key_element() == "hydra.searchpath":
                searchpath.append(text)
            continue
        if not parsed.is_sweep_override():
            choices.append([text])
            continue
        try:
            values = list(parsed.sweep_string_iterator())
        except Exception:  # noqa: BLE001 - glob/interval sweeps: Hydra expands them itself
            continue
        choices.append([f"{parsed.get_key_element()}={v}" for v in values] or [text])
    base = [c[0] for c in choices]
    sets = [base]
    for i, values in enumerate(choices):
        sets += [[*base[:i], v, *base[i + 1 :]] for v in values[1:]]
    return [[*s, *searchpath] for s in sets]


#: Hydra launchers whose jobs run on this machine: the pre-check asks Lightning about this
#: machine's accelerators only for these (a SLURM job's are checked where it runs, by train()).
LOCAL_LAUNCHERS = (
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
)


def _hydra_view(
    overrides: Sequence[str], first: Sequence[str], config_name: str, multirun: bool
) -> tuple[bool, tuple[str, Path] | None, bool]:
    """``(local, run_dir, compares)``: whether the jobs run on this machine (the launcher), for a
    single run the ``(key, dir)`` it writes to (``paths.output_dir`` when set, else
    ``hydra.run.dir``, resolved as Hydra will), and whether a sweep ends with the comparison
    (``hydra.callbacks.compare``). Composed once with Hydra's own overrides; where that fails
    (Hydra then reports what is wrong itself) or a path needs Hydra's runtime, the run dir is
    None."""
    from hydra import compose, initialize_config_dir

    own = [
        text
        for text, parsed in _parseable(overrides)
        if parsed.is_hydra_override() and not parsed.is_sweep_override()
    ]
    try:
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name, overrides=[*first, *own], return_hydra_config=True)
    except Exception:  # noqa: BLE001 - Hydra's own error follows, from Hydra
        return True, None, False
    local = str(cfg.hydra.launcher.get("_target_")) in LOCAL_LAUNCHERS
    compares = COMPARE_CALLBACK in {
        str(c.get("_target_")) for c in (cfg.hydra.get("callbacks") or {}).values()
    }
    if multirun:
        return local, None, compares
    try:
        if cfg.paths.output_dir is not None:
            return local, ("paths.output_dir", Path(str(cfg.paths.output_dir))), compares
        return local, ("hydra.run.dir", Path(str(cfg.hydra.run.dir))), compares
    except Exception:  # noqa: BLE001 - e.g. ${hydra:...} in a path: known only under Hydra
        return local, None, compares


#: The end-of-sweep comparison's Hydra callback (conf/hydra/default.yaml).
COMPARE_CALLBACK = "rmsnorm_kernel.experiment.analysis.CompareOnMultirunEnd"


def _parseable(overrides: Sequence[str]) -> list[tuple[str, Any]]:
    """``(text, Hydra's parsed override)`` of each override that parses (the others are
    reported by :func:`_override_sets`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    out = []
    for text in overrides:
        try:
            (parsed,) = parser.parse_overrides([text])
        except Exception:  # noqa: BLE001 - reported by _override_sets
            continue
        out.append((text, parsed))
    return out


def _norm_values(overrides: Sequence[str]) -> list[str]:
    """The values a ``norm=a,b,...`` sweep override lists, repeats kept (none: [])."""
    for _, parsed in _parseable(overrides):
        if parsed.get_key_element() == "norm" and parsed.is_sweep_override():
            try:
                return [str(v) for v in parsed.sweep_string_iterator()]
            except Exception:  # noqa: BLE001 - glob sweeps: Hydra expands them itself
                return []
    return []


def check_sweep(overrides: Sequence[str], cfgs: Sequence[Any]) -> None:
    """What the end-of-sweep comparison needs, known before any job runs (else every job would
    train first and the comparison fail after): at least two branches (norms), none listed
    twice, each config's ``compare.baseline`` among them, and every job training and testing.

    Raises :class:`SettingsError` (one line)."""
    listed = _norm_values(overrides)
    repeated = sorted({n for n in listed if listed.count(n) > 1})
    if repeated:
        raise SettingsError(
            f"norm must list each branch once in a --multirun (got {','.join(listed)}: "
            f"{', '.join(repeated)} twice); repeat a run with seed=0,1 instead"
        )
    names = sorted({str(cfg.norm.name) for cfg in cfgs})
    off = "; or run without the comparison: ~hydra.callbacks.compare"
    if len(names) < 2:
        raise SettingsError(
            f"a --multirun ends by comparing branches: sweep norm over at least two, e.g. "
            f"norm=reference,triton (got only norm={names[0]}){off}"
        )
    for cfg in cfgs:
        baseline = cfg.get("compare", {}).get("baseline")
        if baseline not in names:
            raise SettingsError(
                f"compare.baseline must be one of the sweep's norms {names} (got {baseline!r})"
            )
        for key in ("train", "test"):
            if cfg.get(key) is not True:
                raise SettingsError(
                    f"{key} must be true in a --multirun: the comparison judges trained and "
                    f"tested branches (got {key}={cfg.get(key)}){off}"
                )


def precheck(
    overrides: Sequence[str], config_name: str = CONFIG_NAME, multirun: bool = False
) -> None:
    """Compose and check the config for every value the command line asks for.

    A single run's dir (``hydra.run.dir`` or ``paths.output_dir``) is checked too: writable and
    not a finished run's (:func:`~rmsnorm_kernel.experiment.core.settings.check_run_dir`); a
    sweep's jobs write under ``hydra.sweep.dir``, refused at the sweep's start when it holds
    files. ``ckpt_path``'s checkpoint is read and checked here (branch, config, step budget, a
    warm start's tensor names and shapes), before Hydra makes any dir. The trainer's devices are
    checked against this machine when the jobs run here (not under ``hydra/launcher=slurm``).

    Raises :class:`SettingsError` (one line) for a malformed override, an unknown key or a value
    that breaks its rule."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    sets = _override_sets(overrides)
    local, run_dir, compares = _hydra_view(overrides, sets[0], config_name, multirun)
    where = {} if run_dir is None else {"run_dir": run_dir[1], "run_dir_key": run_dir[0]}
    cfgs = []
    for concrete in sets:
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            try:
                cfg = compose(config_name, overrides=concrete)
            except HydraException as e:
                culprit = override_culprit(concrete, str(e)) or concrete
                raise SettingsError(_one_line(str(culprit), e)) from e
        check_train_config(cfg, paths=False, here=local, **where)
        cfgs.append(cfg)
    if multirun and compares:
        check_sweep(overrides, cfgs)


def apart_note(output_dir: str, hydra_dir: str) -> str | None:
    """The warning for a ``paths.output_dir`` away from Hydra's own run dir, or None where the
    two are one dir: the run's files then go to ``output_dir`` while Hydra's (``.hydra/``, the
    job log) stay in ``hydra_dir``."""
    if Path(output_dir).resolve() == Path(hydra_dir).resolve():
        return None
    return (
        f"paths.output_dir={output_dir}: this run's files go there, but Hydra's own (.hydra/, "
        f"the job log) stay in {hydra_dir}; pass hydra.run.dir={output_dir} instead to keep "
        "them in one dir"
    )


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=CONFIG_NAME)
def _hydra_main(cfg: DictConfig) -> dict[str, Any]:
    hydra_dir = HydraConfig.get().runtime.output_dir
    if cfg.paths.output_dir is None:  # default: everything under this run's Hydra dir
        with open_dict(cfg):
            cfg.paths.output_dir = hydra_dir
    elif note := apart_note(str(cfg.paths.output_dir), hydra_dir):
        log.warning(note)
    try:
        return train(cfg)
    except SettingsError as e:  # Hydra would print a traceback and exit 1
        raise refuse(e) from e
    except ExportFailed as e:  # one line; metrics.json and last.ckpt were kept
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        raise SystemExit(1) from e


def main(argv: Sequence[str] | None = None) -> Any:
    """``python -m rmsnorm_kernel.train`` / ``rmsnorm-train``: the pre-check, then Hydra."""
    from hydra._internal.utils import get_args_parser

    argv = list(sys.argv[1:] if argv is None else argv)
    args, unparsed = get_args_parser().parse_known_args(argv)
    informational = args.help or args.hydra_help or args.info or args.cfg or args.shell_completion
    # unparsed: e.g. overrides after an option (`a=1 --multirun b=2`), which Hydra refuses with
    # its usage line; checking only the overrides before it would name the wrong cause.
    if not informational and (here := inside_checkout_below_root()) is not None:
        raise refuse(below_root_message(here))
    if not informational and args.config_path is None and not unparsed:
        try:
            precheck(args.overrides, args.config_name or CONFIG_NAME, multirun=args.multirun)
        except SettingsError as e:
            raise refuse(e) from e
    return _hydra_main()


if __name__ == "__main__":
    main()
