"""The comparison commands: judge finished runs again, with tolerances from ``conf/compare/``.

``equivalence DDP_SWEEP SINGLE_SWEEP [overrides...] [--out FILE]``
    a DDP sweep trains like one process: the runs of the two sweeps paired by norm, curves,
    ``compare.metric`` and exported weights against ``compare.equivalence``'s tolerances. The
    compare config is training's (``conf/train.yaml``) with the overrides, so ``compare=lm``
    (or the experiment the sweeps ran) picks the language model's. Exit 1 when a pair differs
    beyond a tolerance or the sweeps cannot be paired.
``compare SWEEP_DIR [overrides...]``
    the end-of-sweep comparison of a finished sweep again (tables, comparison.json,
    lm_comparison.json with the throughput check), each group with the compare config its runs
    ran with (their saved Hydra config; else the sweep's ``multirun.yaml``) plus optional
    ``compare.*`` overrides (a key of that config, or one of :data:`COMPARE_KEYS`, e.g.
    ``compare.checks=[metric_delta,curve] compare.curve_tolerance=1e-4``). Exit 1 when a check
    fails or the sweep is incomplete: every job its ``multirun.yaml`` records must have written
    ``metrics.json`` (a crashed or unfinished job is named), else nothing is judged or written.
    A sweep moved or copied since it ran is read from where it is now. Without overrides it
    writes ``comparison.json`` (and the PNG) again, the same verdict; with overrides the files
    are ``comparison_rejudged.json``, ``loss_curves_rejudged.png`` (and
    ``lm_comparison_rejudged.json``): the verdict the sweep wrote when it ran is kept.

A bad argument, override or tolerance stops the command with exit code 2 and one line on stderr
(``error: ...``, naming it and the rule) before it reads any run: a sweep dir that does not exist,
is a file, holds no ``multirun.yaml``, or is one run's dir (its sweep dir is named); for
``equivalence`` the same sweep dir twice (a sweep always equals itself). ``equivalence`` also
exits 2, once it has read the runs' ``metrics.json`` and before it writes anything, when a run of
the first sweep (the DDP side) has ``world_size`` 1 or a norm ran with the same world size in
both sweeps (:func:`~rmsnorm_kernel.experiment.analysis.equivalence.check_world_sizes`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rmsnorm_kernel.cli.validate import ConfigError, compose_error

COMMANDS = ("equivalence", "compare")
#: ``compare.*`` keys a ``compare`` override may set though the sweep's config lacks them (the
#: checks' tolerances: ``compare.checks=[...,curve]`` needs ``compare.curve_tolerance``).
COMPARE_KEYS = (
    "baseline",
    "metric",
    "curve",
    "checks",
    "delta_metric_tolerance",
    "initial_error_tolerance",
    "curve_tolerance",
)
SWEEP_RULE = "a finished --multirun sweep dir (the one holding multirun.yaml)"


def add_parsers(sub) -> None:
    """The two commands' parsers, on ``python -m rmsnorm_kernel.cli``'s subparsers."""
    text = "a DDP sweep trains like one process (curves, metric, weights per norm)"
    p = sub.add_parser("equivalence", help=text, description=text)
    p.add_argument("ddp_sweep", type=Path, help="the sweep dir of the DDP runs")
    p.add_argument("single_sweep", type=Path, help="the sweep dir of the one-process runs")
    # default=[]: the overrides are optional (argparse calls a "*" positional without a
    # default "required" when another positional is missing).
    p.add_argument(
        "overrides",
        nargs="*",
        default=[],
        help="optional Hydra overrides of training's config, e.g. compare=lm",
    )
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    p.add_argument("--config-dir", type=Path, default=None, help="config dir (default conf/)")
    text = "the end-of-sweep comparison of a finished sweep again, with its compare config"
    p = sub.add_parser("compare", help=text, description=text)
    p.add_argument("sweep_dir", type=Path, help="a finished --multirun sweep dir")
    p.add_argument(
        "overrides",
        nargs="*",
        default=[],
        metavar="compare.KEY=VALUE",
        help="optional overrides of the sweep's compare config, e.g. "
        "compare.initial_error_tolerance=0 (then written to comparison_rejudged.json, "
        "keeping the sweep's comparison.json)",
    )


def compare_config(overrides: Sequence[str], config_dir: Path | None = None) -> dict:
    """The ``compare`` section of training's config (``conf/train.yaml``) with ``overrides``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rmsnorm_kernel.paths import config_dir as default_config_dir

    conf = Path(config_dir or default_config_dir()).resolve()
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3", job_name="cli"):
            cfg = compose(config_name="train", overrides=list(overrides))
    except Exception as exc:  # noqa: BLE001 - Hydra's override/composition errors vary
        raise compose_error(overrides, exc) from exc
    return OmegaConf.to_container(cfg.compare, resolve=True)


def check_sweep_dir(path: Path, key: str, *, multirun: bool = True) -> Path:
    """``path`` (argument ``key``) as a sweep dir: an existing directory, not one run's dir
    (then its sweep dir is named), holding ``multirun.yaml`` when ``multirun``.

    Raises :class:`ConfigError` naming the argument, the rule and the path."""
    path = Path(path)
    rule = f"{key} must be {SWEEP_RULE}"
    if not path.exists():
        raise ConfigError(f"{rule}; {path} does not exist")
    if not path.is_dir():
        raise ConfigError(f"{rule}; {path} is a file")
    if (path / "metrics.json").is_file():
        parent = path.resolve().parent
        hint = (
            f"pass its sweep dir {parent}"
            if (parent / "multirun.yaml").is_file()
            else "a single run: a comparison needs a sweep"
        )
        raise ConfigError(f"{rule}; {path} is one run's dir (it holds metrics.json): {hint}")
    if multirun and not (path / "multirun.yaml").is_file():
        raise ConfigError(f"{rule}; {path} holds no multirun.yaml")
    return path


def saved_compare_config(sweep_dir: Path, overrides: Sequence[str]) -> dict:
    """The ``compare`` section a finished sweep ran with (its ``multirun.yaml``), with
    ``compare.key=value`` overrides applied."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    saved = check_sweep_dir(sweep_dir, "sweep_dir") / "multirun.yaml"
    try:
        compare = OmegaConf.load(saved).get("compare")
    except (OmegaConfBaseException, ValueError, OSError) as e:  # yaml errors are ValueErrors
        reason = " ".join(str(e).split())
        raise ConfigError(f"sweep_dir: {saved} must be a readable YAML file ({reason})") from e
    if not isinstance(compare, DictConfig):
        raise ConfigError(
            f"sweep_dir: {saved} must hold the sweep's compare section (a sweep of "
            "`python -m rmsnorm_kernel.train --multirun`); it has none"
        )
    return apply_compare_overrides(OmegaConf.to_container(compare, resolve=True), overrides)


def apply_compare_overrides(compare: dict, overrides: Sequence[str]) -> dict:
    """``compare`` (a plain dict) with ``compare.key=value`` overrides applied: a key the config
    holds, or one of :data:`COMPARE_KEYS`."""
    from omegaconf import OmegaConf

    conf = OmegaConf.create(compare)
    for override in overrides:
        key, sep, value = override.partition("=")
        name = key[len("compare.") :] if key.startswith("compare.") else None
        if (
            not sep
            or not name
            or (OmegaConf.select(conf, name) is None and name not in COMPARE_KEYS)
        ):
            known = sorted(set(COMPARE_KEYS) | set(compare))
            raise ConfigError(
                f"override {override!r} must be compare.KEY=VALUE with KEY one of {known} "
                "(or a key under them)"
            )
        OmegaConf.update(conf, name, _value(value), force_add=True)
    return OmegaConf.to_container(conf, resolve=True)


def _value(text: str):
    """A command-line value as YAML reads it (``0`` -> 0, ``1e-3`` -> 0.001, ``[a,b]`` -> list)."""
    import yaml

    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def run(args: argparse.Namespace, console) -> int:
    """Run ``args.command`` (one of :data:`COMMANDS`); the exit code."""
    from rmsnorm_kernel.cli.validate import report_error
    from rmsnorm_kernel.experiment.analysis import ComparisonError, compare_runs, sweep_runs
    from rmsnorm_kernel.experiment.analysis.equivalence import compare_sweeps, format_pairs
    from rmsnorm_kernel.experiment.analysis.report import REJUDGED, format_result
    from rmsnorm_kernel.experiment.core.settings import SettingsError

    try:
        if args.command == "equivalence":
            # Sweep dirs of runs laid out as a sweep's: multirun.yaml not required.
            for key in ("ddp_sweep", "single_sweep"):
                check_sweep_dir(getattr(args, key), key, multirun=False)
            if args.ddp_sweep.resolve() == args.single_sweep.resolve():
                raise ConfigError(
                    f"ddp_sweep and single_sweep must be two sweeps; both are {args.ddp_sweep} "
                    "(a sweep always equals itself)"
                )
            settings = compare_config(args.overrides, args.config_dir)
            result = compare_sweeps(args.ddp_sweep, args.single_sweep, settings)
            print(format_pairs(result))
            if args.out:
                args.out.write_text(json.dumps(result, indent=2) + "\n")
        else:
            settings = saved_compare_config(args.sweep_dir, args.overrides)
            result = compare_runs(
                sweep_runs(args.sweep_dir),  # every job of the sweep finished, else exit 1
                args.sweep_dir,
                settings,
                per_run=True,  # each group by its runs' own config, as at the sweep's end
                adjust=lambda c: apply_compare_overrides(c, args.overrides),
                # Other settings, another verdict: beside the sweep's own, which stays.
                suffix=REJUDGED if args.overrides else "",
            )
            print(format_result(result))
    except (ConfigError, SettingsError) as exc:
        return report_error(exc)  # one line on stderr, exit 2
    except ComparisonError as exc:
        print(f"{args.command} failed: {exc}", file=sys.stderr)
        return 1
    return 0 if result["passed"] else 1
