"""The command set: ``python -m rmsnorm_kernel.cli <command> [hydra overrides...]``.

Each command proves one claim (and is a Make target of the same name):

=====================  ========================================================================
command                what it proves / does
=====================  ========================================================================
reference              the float64 oracle is right (gradcheck, manual_backward)
data                   the MLP task's synthetic splits as safetensors + a manifest (sha256)
check-forward          y matches the float64 oracle on every case, every element
check-backward         dx matches the float64 oracle (autograd) on every case, every element
check-weight           dweight matches the float64 oracle (autograd) on every case
                       (``check-gamma``: the same command under its old name)
exercise               every planted classic kernel bug is caught (mutation testing)
bench                  ours beside its peers: graph and end-to-end times, GB/s, ratios, host
                       cost, peak memory, bandwidth curves (GPU only; ``--quick``: fewer shapes)
benchmark              ``bench`` with the tutorial's timing protocol (``benchmark=tutorial``)
plot                   PNG figures from the JSON of the checks and of ``bench``
check-checkpoints      exported checkpoints reload bit for bit (``make reload-check``'s code)
equivalence            a DDP sweep trained like one process (curves, metric, weights per norm)
compare                a finished sweep's comparison again (comparison.json, tables)
clean                  delete generated files under outputs/ and checkpoints/ (--dry-run lists)
check-environment      CUDA + one real kernel launch, or a clear "interpreter" notice
=====================  ========================================================================

Configs are composed with Hydra's compose API from the repo's ``conf/cli.yaml`` (groups
``campaign``, ``exercise``, ``benchmark``); positional arguments are Hydra overrides, e.g.
``check-forward campaign.grids=[smoke]``. A config value that breaks its rule stops the command
with exit code 2 before it writes anything: one line ``error: <message>`` on stderr naming the key
(or argument) and the rule.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rmsnorm_kernel.paths import CONFIG_DIR as CONF_DIR  # the repo's conf/

CONFIG_NAME = "cli"  # conf/cli.yaml: the command set's own root, apart from training's
CAMPAIGNS = ("check-forward", "check-backward", "check-weight")
# Old names kept so existing scripts and Make targets still run the same code.
ALIASES = {"check-gamma": "check-weight"}
# Commands that are `bench` with a config preset.
PRESETS = {"benchmark": "benchmark=tutorial"}


def compose(overrides: Sequence[str] = (), *, config_dir: Path | None = None):
    """The command's config: ``conf/cli.yaml`` + overrides (Hydra's compose API)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    conf = Path(config_dir or CONF_DIR).resolve()
    if not (conf / f"{CONFIG_NAME}.yaml").exists():
        raise SystemExit(f"error: no {CONFIG_NAME}.yaml in {conf} (pass --config-dir)")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3", job_name="cli"):
        return hydra_compose(config_name=CONFIG_NAME, overrides=list(overrides))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rmsnorm_kernel.cli", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def add(name: str, help_: str, overrides: bool = True, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, **kw)
        if overrides:
            # default=[]: optional (argparse calls a "*" positional without one "required").
            p.add_argument(
                "overrides", nargs="*", default=[], help="Hydra overrides, e.g. campaign.seed=1"
            )
            p.add_argument(
                "--config-dir", type=Path, default=None, help=f"config dir (default {CONF_DIR})"
            )
        return p

    add("reference", "gradcheck the float64 oracle; manual_backward against autograd")
    add("data", "write the MLP task's synthetic splits (safetensors + manifest.json)")
    add("check-forward", "y against the float64 oracle on every configured case")
    add("check-backward", "dx against the float64 oracle on every configured case")
    add(
        "check-weight",
        "dweight against the float64 oracle on every configured case",
        aliases=list(ALIASES),
    )
    add("exercise", "mutation testing: every planted kernel bug must be caught")
    p = add("bench", "ours beside F.rms_norm, torch.compile, Liger, quack (needs a GPU)")
    p.add_argument("--quick", action="store_true", help="fewer shapes and curve points")
    add("benchmark", "bench with the tutorial's timing protocol (needs a GPU)")
    add("plot", "PNG figures from the checks' and bench's JSON (paths.figures_dir)")
    from rmsnorm_kernel.experiment.exports.reload import add_arguments as reload_arguments

    reload_arguments(
        add(
            "check-checkpoints",
            "exported checkpoints reload bit for bit (the code of `make reload-check`)",
            overrides=False,
        )
    )
    from rmsnorm_kernel.cli.analysis import add_parsers as analysis_parsers

    analysis_parsers(sub)  # equivalence, compare: tolerances from conf/compare/
    p = add("clean", "delete generated files under outputs/ and checkpoints/", overrides=False)
    p.add_argument("--scope", choices=["generated"], required=True)
    p.add_argument("--dry-run", action="store_true", help="list, delete nothing")
    p.add_argument(
        "--root", type=Path, default=None, help="must be this project's root (default: found)"
    )
    add(
        "check-environment",
        "initialise CUDA and launch the kernel once (or the interpreter)",
        overrides=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    cmd = ALIASES.get(args.command, args.command)
    from rich.console import Console

    # Wide enough for the tables when piped to a log (rich defaults to 80 columns off a terminal).
    console = Console(width=None if sys.stdout.isatty() else 200)
    if cmd == "check-checkpoints":
        # One checkpoint check in the project: the experiment layer's.
        from rmsnorm_kernel.experiment.exports.reload import run as run_reload

        return run_reload(args)
    if cmd in ("equivalence", "compare"):
        from rmsnorm_kernel.cli.analysis import run as run_analysis

        return run_analysis(args, console)
    if cmd == "clean":
        from rmsnorm_kernel.cli.clean import run_clean

        return run_clean(args.root, args.scope, args.dry_run, console)
    if cmd == "check-environment":
        from rmsnorm_kernel.cli.environment import run_check_environment

        return run_check_environment(console)

    from rmsnorm_kernel.cli.validate import (
        ConfigError,
        check_command_config,
        compose_error,
        report_error,
    )
    from rmsnorm_kernel.paths import below_root_message, inside_checkout_below_root

    if (here := inside_checkout_below_root()) is not None:  # outputs/ would land in the tree
        return report_error(ConfigError(below_root_message(here)))
    overrides = list(args.overrides)
    if cmd in PRESETS:
        overrides.insert(0, PRESETS[cmd])
    if getattr(args, "quick", False):
        overrides.insert(0, "benchmark=quick")
    try:
        try:
            cfg = compose(overrides, config_dir=args.config_dir)
        except Exception as exc:  # noqa: BLE001 - Hydra's override/composition errors vary
            raise compose_error(overrides, exc) from exc
        check_command_config(cfg)
        return _run(cmd, cfg, console)
    except ConfigError as exc:
        return report_error(exc)  # one line on stderr, exit 2


def _run(cmd: str, cfg, console) -> int:
    from rmsnorm_kernel.cli.validate import directory, writable_dir

    if cmd == "reference":
        from rmsnorm_kernel.cli.campaigns.reference_check import run_reference

        # An empty campaign.out_dir= would write oracle.json into the current directory.
        return run_reference(cfg, writable_dir(cfg.campaign.out_dir, "campaign.out_dir"), console)
    if cmd == "data":
        from rmsnorm_kernel.cli.data import run_data

        # A file in the way or a read-only dir: refused before the splits are made.
        return run_data(cfg, writable_dir(cfg.paths.data_dir, "paths.data_dir"), console)
    if cmd in CAMPAIGNS:
        from rmsnorm_kernel.cli.campaigns.runner import run_campaign

        payload = run_campaign(cmd, cfg.campaign, console=console)
        return 0 if payload["passed"] else 1
    if cmd == "exercise":
        from rmsnorm_kernel.cli.exercise.runner import run_exercise

        return run_exercise(cfg, console)
    if cmd in ("bench", "benchmark"):
        from rmsnorm_kernel.cli.bench.run import run_bench

        return run_bench(cfg.benchmark, console)
    if cmd == "plot":
        from rmsnorm_kernel.cli.plots import run_plots

        return run_plots(
            directory(cfg.campaign.out_dir, "campaign.out_dir"),
            directory(cfg.benchmark.out_dir, "benchmark.out_dir") / "bench.json",
            writable_dir(cfg.paths.figures_dir, "paths.figures_dir"),  # before any figure
            console,
        )
    raise AssertionError(cmd)


if __name__ == "__main__":
    sys.exit(main())
