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
    ran with (their saved Hydra config; else the sweep's ``multirun.yaml``) plus ``compare.*``
    overrides. Exit 1 when a check fails.

A bad override or tolerance stops the command with exit code 2 before it reads any run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rmsnorm_kernel.cli.validate import ConfigError, compose_error

COMMANDS = ("equivalence", "compare")


def add_parsers(sub) -> None:
    """The two commands' parsers, on ``python -m rmsnorm_kernel.cli``'s subparsers."""
    text = "a DDP sweep trains like one process (curves, metric, weights per norm)"
    p = sub.add_parser("equivalence", help=text, description=text)
    p.add_argument("ddp_sweep", type=Path, help="the sweep dir of the DDP runs")
    p.add_argument("single_sweep", type=Path, help="the sweep dir of the one-process runs")
    p.add_argument(
        "overrides", nargs="*", help="Hydra overrides of training's config, e.g. compare=lm"
    )
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    p.add_argument("--config-dir", type=Path, default=None, help="config dir (default conf/)")
    text = "the end-of-sweep comparison of a finished sweep again, with its compare config"
    p = sub.add_parser("compare", help=text, description=text)
    p.add_argument("sweep_dir", type=Path, help="a finished --multirun sweep dir")
    p.add_argument(
        "overrides", nargs="*", help="compare.* overrides, e.g. compare.curve_tolerance=0"
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


def saved_compare_config(sweep_dir: Path, overrides: Sequence[str]) -> dict:
    """The ``compare`` section a finished sweep ran with (its ``multirun.yaml``), with
    ``compare.key=value`` overrides applied."""
    from omegaconf import OmegaConf

    saved = Path(sweep_dir) / "multirun.yaml"
    if not saved.is_file():
        raise ConfigError(f"{saved}: not found (not a finished multirun sweep dir)")
    compare = OmegaConf.to_container(OmegaConf.load(saved).compare, resolve=True)
    return apply_compare_overrides(compare, overrides)


def apply_compare_overrides(compare: dict, overrides: Sequence[str]) -> dict:
    """``compare`` (a plain dict) with ``compare.key=value`` overrides applied."""
    from omegaconf import OmegaConf

    conf = OmegaConf.create(compare)
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key.startswith("compare.") or OmegaConf.select(conf, key[8:]) is None:
            raise ConfigError(f"override {override!r} must be compare.<existing key>=value")
        OmegaConf.update(conf, key[8:], _value(value))
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
    from rmsnorm_kernel.experiment.analysis import ComparisonError, compare_runs, find_runs
    from rmsnorm_kernel.experiment.analysis.equivalence import compare_sweeps, format_pairs
    from rmsnorm_kernel.experiment.analysis.report import format_result
    from rmsnorm_kernel.experiment.core.settings import SettingsError

    try:
        if args.command == "equivalence":
            settings = compare_config(args.overrides, args.config_dir)
            result = compare_sweeps(args.ddp_sweep, args.single_sweep, settings)
            print(format_pairs(result))
            if args.out:
                args.out.write_text(json.dumps(result, indent=2) + "\n")
        else:
            settings = saved_compare_config(args.sweep_dir, args.overrides)
            result = compare_runs(
                find_runs(args.sweep_dir),
                args.sweep_dir,
                settings,
                per_run=True,  # each group by its runs' own config, as at the sweep's end
                adjust=lambda c: apply_compare_overrides(c, args.overrides),
            )
            print(format_result(result))
    except (ConfigError, SettingsError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    except ComparisonError as exc:
        print(f"{args.command} failed: {exc}", file=sys.stderr)
        return 1
    return 0 if result["passed"] else 1
