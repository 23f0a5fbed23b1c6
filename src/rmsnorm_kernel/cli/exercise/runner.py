"""`exercise`: the tutorial's exercise generalised into mutation testing.

1. The tutorial's hypothesis, checked with numbers: a row of N ones (weight = 1, eps = 1e-6) through
   the BLOCK-denominator mutant gives ~0.9999995 at N=256 (BLOCK == N: the bug hides) and
   ~1.411458 at N=257 (BLOCK = 512: mean(x^2) = 257/512).
2. The unmutated control passes every case (otherwise a "kill" would prove nothing).
3. Each mutant runs through the campaign checks (y, dx, dweight against the float64 oracle, with the
   campaign tolerances), case after case; the first failing element kills it. A mutant that passes
   every case *survives* and the command exits non-zero.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

from rmsnorm_kernel.cli.campaigns.evaluate import evaluate_case
from rmsnorm_kernel.cli.campaigns.runner import check_grids
from rmsnorm_kernel.cli.common import Tolerances, environment, fmt, read_tolerances, write_json
from rmsnorm_kernel.cli.exercise.mutants import MUTANTS, mutant_rmsnorm
from rmsnorm_kernel.cli.validate import ConfigError, count, eps, number, writable_dir

QUANTITIES = ("y", "dx", "dweight")
CAMPAIGN_OF = {"y": "check-forward", "dx": "check-backward", "dweight": "check-weight"}


def block_demo(demo: Mapping, device) -> dict:
    """Row of N ones through the control and mutant 1, at n_pass and n_fail."""
    out = {}
    for n in (int(demo["n_pass"]), int(demo["n_fail"])):
        x = torch.ones(1, n, device=device)
        w = torch.ones(n, device=device)
        for mutation in (0, 1):
            y = mutant_rmsnorm(mutation)(x, w, 1e-6)
            out[f"N={n} mutant={mutation}"] = float(y[0, 0])
    n_pass, n_fail = int(demo["n_pass"]), int(demo["n_fail"])
    atol = float(demo["atol"])
    expected = {
        f"N={n_pass} mutant=0": float(demo["correct"]),
        f"N={n_pass} mutant=1": float(demo["correct"]),  # BLOCK == N: the bug hides
        f"N={n_fail} mutant=0": float(demo["correct"]),
        f"N={n_fail} mutant=1": float(demo["mutant"]),  # 1 / sqrt(257/512 + eps)
    }
    ok = all(abs(out[k] - v) <= atol for k, v in expected.items())
    return {"values": out, "expected": expected, "atol": atol, "passed": ok}


def hunt(
    mutation: int, cases, ccfg: Mapping, tolerances: Tolerances, device, stop_at_first: bool
) -> dict:
    """Run the campaign checks on one mutant; returns its record (``ccfg["eps"]`` checked by
    the caller: :func:`run_exercise`)."""
    impl = mutant_rmsnorm(mutation)
    record = {
        "id": mutation,
        **{k: v for k, v in vars(MUTANTS[mutation]).items() if k != "id"},
        "cases_run": 0,
        "caught_by": [],
        "first_catch": None,
    }
    for case in cases:
        with warnings.catch_warnings():  # mutant 6 overflows fp16 on purpose (interpreter warns)
            warnings.simplefilter("ignore", RuntimeWarning)
            res = evaluate_case(
                case,
                impl,
                QUANTITIES,
                eps=float(ccfg["eps"]),
                seed=int(ccfg["seed"]),
                device=device,
                tolerances=tolerances,
            )
        record["cases_run"] += 1
        if res.status in ("fail", "error"):
            failing = [q for q, qr in res.quantities.items() if not qr.passed]
            catch = {
                "case": case.name,
                "campaigns": [CAMPAIGN_OF[q] for q in failing] or ["error"],
                "max_abs_err": {q: res.quantities[q].max_abs_err for q in failing},
                "failing_elements": {q: res.quantities[q].failing_elements for q in failing},
                "message": res.message,
            }
            record["caught_by"].append(catch)
            if record["first_catch"] is None:
                record["first_catch"] = catch
            if stop_at_first:
                break
    record["killed"] = record["first_catch"] is not None
    return record


def check_exercise_config(ecfg) -> list[int]:
    """The exercise's own keys against their rules (:class:`ConfigError` naming the key) before
    anything runs: ``mutants`` a non-empty list of known ids (none would be a pass with nothing
    tested), ``control`` a bool, ``block_demo``'s widths integers >= 1 and its figures finite
    numbers. Returns the mutant ids."""
    ids = sorted(set(MUTANTS) - {0})
    raw = ecfg["mutants"]
    items = list(raw) if OmegaConf.is_list(raw) or isinstance(raw, list | tuple) else None
    if items is None or any(isinstance(m, bool) or not isinstance(m, int) for m in items):
        shown = OmegaConf.to_container(raw) if OmegaConf.is_config(raw) else raw
        raise ConfigError(
            f"exercise.mutants must be a list of mutant ids from {ids} (got {shown!r})"
        )
    if not items:
        raise ConfigError(f"exercise.mutants must name at least one mutant from {ids} (got [])")
    unknown = [m for m in items if m not in MUTANTS or m == 0]
    if unknown:
        raise ConfigError(
            f"exercise.mutants must be ids from {ids} (got {unknown}; "
            "the control, 0, runs through exercise.control)"
        )
    control = ecfg.get("control", True)
    if not isinstance(control, bool):
        raise ConfigError(f"exercise.control must be true or false (got {control!r})")
    demo = ecfg["block_demo"]
    for key in ("n_pass", "n_fail"):
        count(demo[key], f"exercise.block_demo.{key}")
    for key in ("correct", "mutant", "atol"):
        number(demo[key], f"exercise.block_demo.{key}")
    return items


def run_exercise(cfg, console: Console | None = None) -> int:
    from rmsnorm_kernel.backend import kernel_device

    console = console or Console()
    ecfg, ccfg = cfg.exercise, cfg.campaign
    # Every key is checked before anything runs or is written (ConfigError: exit 2).
    tolerances = read_tolerances(ccfg["tolerances"])
    eps(ccfg["eps"], "campaign.eps")  # the mutants' checks run with the campaign's eps
    mutants = check_exercise_config(ecfg)
    cases = [
        c
        for c in check_grids(ccfg["catalogue"], ecfg["grids"], "exercise.grids")
        if c.tutorial_contract
    ]
    if not cases:
        raise ConfigError(
            f"exercise.grids must hold tutorial-contract cases (2-D contiguous fp32/fp16, "
            f"N <= 4096); {list(ecfg['grids'])} hold none"
        )
    # an empty exercise.out_dir= would write exercise.json into the current directory
    out_dir = writable_dir(ecfg.get("out_dir", "outputs/exercise"), "exercise.out_dir")
    device = kernel_device()

    demo = block_demo(ecfg["block_demo"], device)
    table = Table(title="The tutorial's exercise: a row of N ones, weight = 1, eps = 1e-6")
    for col in ("N", "BLOCK", "divide by N (control)", "divide by BLOCK (mutant 1)", "bug visible"):
        table.add_column(col, justify="right")
    for n in (int(ecfg.block_demo.n_pass), int(ecfg.block_demo.n_fail)):
        good, bad = demo["values"][f"N={n} mutant=0"], demo["values"][f"N={n} mutant=1"]
        block = 1 << (n - 1).bit_length()
        table.add_row(
            str(n),
            str(block),
            f"{good:.7f}",
            f"{bad:.7f}",
            "yes" if abs(good - bad) > 1e-6 else "no",
        )
    console.print(table)
    if not demo["passed"]:
        console.print(
            f"[red]FAIL[/red] block demo: expected {demo['expected']}, got {demo['values']}"
        )

    records = []
    control_ok = True
    if ecfg.get("control", True):
        console.print(f"control (unmutated kernels) on {len(cases)} cases...")
        control = hunt(0, cases, ccfg, tolerances, device, stop_at_first=False)
        control_ok = not control["killed"]
        records.append(control)
    for mutation in mutants:
        console.print(f"mutant {mutation} ({MUTANTS[int(mutation)].name})...")
        records.append(hunt(mutation, cases, ccfg, tolerances, device, stop_at_first=True))

    results = Table(
        title=f"exercise: {len(records) - int(bool(ecfg.get('control', True)))} "
        f"mutants on {len(cases)} cases (first catching case, in case order)"
    )
    for col in (
        "id",
        "mutant",
        "planted bug",
        "result",
        "first catching case",
        "caught by",
        "max abs err",
        "cases run",
    ):
        results.add_column(col)
    for r in records:
        fc = r["first_catch"]
        if r["id"] == 0:
            verdict = "[green]passes[/green]" if not r["killed"] else "[red]FAILS[/red]"
        else:
            verdict = "[green]killed[/green]" if r["killed"] else "[red]SURVIVED[/red]"
        errs = ", ".join(f"{q} {fmt(e)}" for q, e in fc["max_abs_err"].items()) if fc else "-"
        results.add_row(
            str(r["id"]),
            r["name"],
            r["bug"],
            verdict,
            fc["case"] if fc else "-",
            ", ".join(fc["campaigns"]) if fc else "-",
            errs,
            str(r["cases_run"]),
        )
    console.print(results)

    survivors = [r for r in records if r["id"] != 0 and not r["killed"]]
    ok = demo["passed"] and control_ok and not survivors
    path = write_json(
        {
            "command": "exercise",
            "environment": environment(),
            "cases": [c.name for c in cases],
            "block_demo": demo,
            "control_passed": control_ok,
            "mutants": records,
            "survivors": [r["id"] for r in survivors],
            "passed": ok,
        },
        out_dir / "exercise.json",
    )
    if not control_ok:
        console.print("[red]FAIL[/red] the unmutated control fails a case: a kill proves nothing")
    for r in survivors:
        console.print(f"[red]SURVIVED[/red] mutant {r['id']} ({r['name']}): no case catches it")
    verdict = "[green]PASS[/green]" if ok else "[red]FAIL[/red]"
    console.print(
        f"{verdict} exercise: {sum(r['killed'] for r in records if r['id'])}/"
        f"{len([r for r in records if r['id']])} mutants killed -> {path}"
    )
    return 0 if ok else 1
