"""bench: refusals (no GPU, bad config), the bytes and ratio rules, the peer registry, and a whole
run on the CPU with stand-in timers (cells, failures, ratios, JSON, tables, figures)."""

from __future__ import annotations

import io
import math
import time

import pytest
import torch
from cli_helpers import read_json, run_cli
from omegaconf import OmegaConf
from rich.console import Console

import rmsnorm_kernel as rk
from rmsnorm_kernel.cli.bench import measure, peers
from rmsnorm_kernel.cli.bench.compare import rank, traffic_bytes
from rmsnorm_kernel.cli.bench.run import run_bench
from rmsnorm_kernel.cli.common import read_tolerances
from rmsnorm_kernel.cli.main import compose
from rmsnorm_kernel.reference import rmsnorm_reference

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-GPU refusal")
# These run our kernels on CPU tensors with stand-in timers: only Triton's interpreter takes CPU
# tensors (compiled kernels refuse them by contract); on a GPU machine test_bench_on_gpu runs it.
needs_interpreter = pytest.mark.skipif(
    rk.BACKEND != "interpreter", reason="runs the kernels on CPU tensors (Triton's interpreter)"
)
PNG = b"\x89PNG\r\n\x1a\n"


class CpuTimers:
    """Stand-in for ``CudaTimers``: each call really runs (on the CPU) and is timed with
    ``perf_counter``, so everything but the CUDA timing itself is exercised."""

    def time(self, mode, make):
        call = make()
        call()
        start = time.perf_counter()
        call()
        return (time.perf_counter() - start) * 1e6

    def host(self, make, calls, warmup_calls):
        call = make()
        for _ in range(warmup_calls):
            call()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        return (time.perf_counter() - start) / calls * 1e6

    def peak_bytes(self, make):
        out = make()()
        tensors = out if isinstance(out, tuple) else (out,)
        return sum(t.numel() * t.element_size() for t in tensors)


def _small(tmp_path, **changes) -> dict:
    """The default benchmark config, shrunk to shapes the interpreter runs in milliseconds."""
    cfg = OmegaConf.to_container(compose().benchmark, resolve=True)
    cfg.update(
        out_dir=str(tmp_path),
        implementations=["ours", "torch", "reference", "liger", "quack"],
        shapes=[{"m": 4, "n": 64, "dtype": "float32"}, {"m": 3, "n": 200, "dtype": "float32"}],
        copy_bytes=4096,
    )
    cfg["host"].update(shape={"m": 4, "n": 64, "dtype": "float32"}, calls=3, warmup_calls=1)
    cfg["curves"].update(dtype="float32", n={"elements": 256, "values": [32, 64, 128]})
    cfg["curves"]["m"] = {"n": 64, "values": [2, 4]}
    cfg.update(changes)
    return cfg


def _run(cfg) -> tuple[int, str]:
    out = io.StringIO()
    code = run_bench(cfg, Console(file=out, width=220), timers=CpuTimers(), device="cpu")
    return code, out.getvalue()


@needs_no_gpu
@pytest.mark.parametrize("argv", [["bench"], ["bench", "--quick"], ["benchmark"]])
def test_bench_refuses_without_cuda(tmp_path, capsys, argv):
    out_dir = tmp_path / "bench"
    assert run_cli(*argv, f"benchmark.out_dir={out_dir}") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: bench needs a CUDA GPU") and err.count("\n") == 1, err
    assert not out_dir.exists()


@pytest.mark.parametrize(
    "override,message",
    [
        ("benchmark.implementations=[ours,nope]", "benchmark.implementations[1] must be one of"),
        ("benchmark.shapes=[{m:0,n:4,dtype:float32}]", "benchmark.shapes[0].m must be an integer"),
        ("benchmark.curves.n.values=[3]", "must divide benchmark.curves.n.elements"),
        ("benchmark.timing.graph.target_ms=-1", "benchmark.timing.graph.target_ms must be"),
        ("benchmark.timing.graph.rounds=0", "benchmark.timing.graph.rounds must be"),
        ("benchmark.ours=quack", "benchmark.ours must be one of"),
    ],
)
def test_bad_config_is_refused_before_output(tmp_path, capsys, override, message):
    extra = ["benchmark.implementations=[ours,torch]"] if "ours=" in override else []
    out_dir = tmp_path / "bench"
    assert run_cli("bench", *extra, override, f"benchmark.out_dir={out_dir}") == 2
    assert message in capsys.readouterr().err
    assert not out_dir.exists()


def test_bytes_per_call():
    # forward reads x, writes y; forward+backward adds reading x and dy and writing dx
    assert traffic_bytes(128, 257, 4, "forward") == 2 * 128 * 257 * 4
    assert traffic_bytes(16384, 4096, 2, "forward_backward") == 5 * 16384 * 4096 * 2


def test_ratio_to_best_peer_skips_ours_and_peers_that_did_not_run():
    results = {
        "ours": {"status": "ok", "us": 10.0},
        "a": {"status": "ok", "us": 12.0},
        "b": {"status": "ok", "us": 8.0},
        "c": {"status": "not installed: ImportError"},
        "d": {"status": "fails: RuntimeError: x"},
    }
    assert rank(results, "ours", "us") == ("b", 0.8, {"a": 1.2, "b": 0.8})
    results["ours"] = {"status": "fails: boom"}
    assert rank(results, "ours", "us") == ("b", None, {})
    assert rank({"ours": {"status": "ok", "us": 1.0}}, "ours", "us") == (None, None, {})


@needs_interpreter
def test_peers_compute_the_same_function_on_cpu():
    """Every peer installed here (not compile: CPU Inductor is slow) matches the float64 oracle
    within the campaign's float32 tolerance, forward and input gradient."""
    tol = read_tolerances(compose().campaign.tolerances)["float32"]
    names = ["ours", "torch", "reference", "liger", "quack"]
    built = peers.build(names, 1e-6)
    x = torch.randn(5, 333, dtype=torch.float64)
    w = 1 + 0.5 * torch.randn(333, dtype=torch.float64)
    dy = torch.randn(5, 333, dtype=torch.float64)
    xo, wo = x.clone().requires_grad_(), w.clone().requires_grad_()
    y_oracle = rmsnorm_reference(xo, wo, 1e-6)
    (dx_oracle,) = torch.autograd.grad(y_oracle, (xo,), dy)
    ran = []
    for name, f in built.items():
        if isinstance(f, str):
            assert f.startswith("not installed") and peers.PEERS[name].missing() is not None
            continue
        xf, wf = x.float().requires_grad_(), w.float().requires_grad_()
        y = f(xf, wf)
        (dx,) = torch.autograd.grad(y, (xf,), dy.float())
        for got, want in ((y, y_oracle), (dx, dx_oracle)):
            torch.testing.assert_close(got.double(), want.detach(), **tol)
        ran.append(name)
    assert {"ours", "torch", "reference"} <= set(ran)
    with pytest.raises(KeyError, match="unknown implementations"):
        peers.build(["ours", "nope"], 1e-6)


@needs_interpreter
def test_whole_run_with_cpu_timers(tmp_path):
    code, text = _run(_small(tmp_path))
    assert code == 0, text
    payload = read_json(tmp_path / "bench.json")
    groups = payload["groups"]
    assert {g["section"] for g in groups} == {"table", "host", "curve_n", "curve_m"}
    missing = {n for n in ("liger", "quack") if peers.PEERS[n].missing()}
    for name in missing:  # shown, never dropped
        assert payload["peers"][name]["status"].startswith("not installed")
        assert all(g["results"][name]["status"].startswith("not installed") for g in groups)
    assert "not installed" in text or not missing
    copy = {mode: c["gb_per_s"] for mode, c in payload["copy_ceiling"].items()}
    assert set(copy) == {"graph", "end_to_end"}
    for g in groups:
        assert set(g["results"]) == {"ours", "torch", "reference", "liger", "quack"}
        assert g["results"]["ours"]["status"] == "ok"
        if g["mode"] not in copy:
            continue
        per_element = {"forward": 2, "forward_backward": 5}[g["pass"]] * 4
        assert g["bytes"] == per_element * g["m"] * g["n"]
        ran = {n: r["us"] for n, r in g["results"].items() if r["status"] == "ok"}
        for r in g["results"].values():
            if r["status"] == "ok":
                assert math.isclose(r["gb_per_s"], g["bytes"] / r["us"] / 1e3)
                assert math.isclose(r["pct_of_copy"], 100 * r["gb_per_s"] / copy[g["mode"]])
        best = min((n for n in ran if n != "ours"), key=ran.get)
        assert g["best_peer"] == best
        assert math.isclose(g["ours_vs_best_peer"], ran[best] / ran["ours"])
    assert all(g["m"] * g["n"] == 256 for g in groups if g["section"] == "curve_n")
    tol = read_tolerances(compose().campaign.tolerances)["float32"]
    for g in (g for g in groups if g["mode"] == "error"):
        for name in ("ours", "torch", "reference"):
            assert g["results"][name]["max_abs_err"] < tol["atol"] + tol["rtol"] * 10
    assert (tmp_path / "bench_curves_graph.png").read_bytes()[:8] == PNG
    assert "copy ceiling" in text and "host cost per call" in text


def _flaky(limit: int):
    """A forward that refuses rows wider than ``limit`` (a peer failing on some shapes)."""

    def build(eps):
        def f(x, w):
            if x.shape[-1] > limit:
                raise ValueError(f"no rows wider than {limit}")
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)

        return f

    return build


def _with_flaky(tmp_path, monkeypatch) -> dict:
    """A table-only config of ours, torch and a peer ("flaky") that fails on rows over 100."""
    peer = peers.Peer("flaky", "flaky", "torch", None, _flaky(100), "fails on N > 100")
    monkeypatch.setitem(peers.PEERS, "flaky", peer)
    cfg = _small(tmp_path, implementations=["ours", "torch", "flaky"])
    cfg["host"]["enabled"] = cfg["curves"]["enabled"] = False
    return cfg


@needs_interpreter
def test_a_failing_peer_is_a_cell_not_a_crash(tmp_path, monkeypatch):
    cfg = _with_flaky(tmp_path, monkeypatch)
    code, text = _run(cfg)
    assert code == 0, text
    for g in read_json(tmp_path / "bench.json")["groups"]:
        status = g["results"]["flaky"]["status"]
        if g["n"] > 100:
            assert status == "fails: ValueError: no rows wider than 100"
            assert g.get("best_peer", "torch") == "torch"  # the error rows carry no ratio
        else:
            assert status == "ok"
    assert "flaky fails: ValueError: no rows wider than 100" in text


class CountingTimers(CpuTimers):
    """``host`` returns how many host timings have finished so far (1, 2, ...): which round and
    position each implementation was timed in can then be read back from the JSON."""

    def __init__(self):
        self.done = 0

    def host(self, make, calls, warmup_calls):
        make()()  # a failing implementation raises here, before it counts
        self.done += 1
        return float(self.done)


@needs_interpreter
def test_host_rounds_interleave_rotate_and_keep_the_median(tmp_path, monkeypatch):
    peer = peers.Peer("flaky", "flaky", "torch", None, _flaky(32), "fails on N > 32")
    monkeypatch.setitem(peers.PEERS, "flaky", peer)
    cfg = _small(tmp_path, implementations=["ours", "torch", "flaky"])
    cfg["curves"]["enabled"] = False
    cfg["host"]["rounds"] = 3
    timers = CountingTimers()
    code = run_bench(cfg, Console(file=io.StringIO(), width=220), timers=timers, device="cpu")
    assert code == 0
    host = [g for g in read_json(tmp_path / "bench.json")["groups"] if g["section"] == "host"]
    assert [g["rounds"] for g in host] == [3] * len(host) and len(host) == len(cfg["passes"])
    # Round 0: ours, torch, flaky (fails, then is skipped); round 1 starts at torch, round 2 at
    # flaky: ours 1, 4, 5 and torch 2, 3, 6 in the first pass, the next pass counting on.
    for i, g in enumerate(host):
        r = g["results"]
        assert r["flaky"]["status"] == "fails: ValueError: no rows wider than 32"
        assert "us_rounds" not in r["flaky"]
        base = 6 * i
        assert r["ours"]["us_rounds"] == [base + 1, base + 4, base + 5]
        assert r["torch"]["us_rounds"] == [base + 2, base + 3, base + 6]
        assert r["ours"]["us"] == base + 4 and r["torch"]["us"] == base + 3
    assert timers.done == 6 * len(host)


class OrderTimers(CpuTimers):
    """``time`` returns a value that depends on the position in the order alone: 10 for the
    first implementation timed in a group (after a cell of another group), then 1, 2, ... (so
    the minimum of an implementation's rounds is where it came later)."""

    def __init__(self):
        self.log: list[tuple[str, int]] = []  # (mode, position within the group)
        self.position = 0

    def time(self, mode, make):
        make()()  # a failing implementation raises here, before it counts
        self.position += 1
        self.log.append((mode, self.position))
        return 10.0 if self.position == 1 else float(self.position)


@needs_interpreter
def test_graph_cells_take_the_fastest_of_rotated_rounds(tmp_path, monkeypatch):
    cfg = _with_flaky(tmp_path, monkeypatch)
    cfg["timing"]["graph"]["rounds"] = 3
    timers = OrderTimers()
    runner_timing = measure.Runner.timing

    def timing(self, *args):  # each group's positions count from 1
        timers.position = 0
        return runner_timing(self, *args)

    monkeypatch.setattr(measure.Runner, "timing", timing)
    code = run_bench(cfg, Console(file=io.StringIO(), width=220), timers=timers, device="cpu")
    assert code == 0
    groups = [g for g in read_json(tmp_path / "bench.json")["groups"] if g["mode"] == "graph"]
    assert groups
    for g in groups:
        r = g["results"]
        if g["n"] > 100:  # flaky fails in round 0 (uncounted) and is not timed again
            assert r["flaky"]["status"] == "fails: ValueError: no rows wider than 100"
            assert "us_rounds" not in r["flaky"]
            # round 0: ours 1st, torch 2nd; round 1 from torch: torch 3rd, ours 4th; round 2
            # from flaky (skipped): ours 5th, torch 6th
            assert r["ours"]["us_rounds"] == [10.0, 4.0, 5.0]
            assert r["torch"]["us_rounds"] == [2.0, 3.0, 6.0]
            assert (r["ours"]["us"], r["torch"]["us"]) == (4.0, 2.0)
        else:
            # round 0: ours, torch, flaky; round 1: torch, flaky, ours; round 2: flaky, ours,
            # torch
            assert r["ours"]["us_rounds"] == [10.0, 6.0, 8.0]
            assert r["torch"]["us_rounds"] == [2.0, 4.0, 9.0]
            assert r["flaky"]["us_rounds"] == [3.0, 5.0, 7.0]
            assert (r["ours"]["us"], r["torch"]["us"], r["flaky"]["us"]) == (6.0, 2.0, 3.0)
    # end to end keeps one round: every implementation timed once per group, in order
    e2e = [g for g in read_json(tmp_path / "bench.json")["groups"] if g["mode"] == "end_to_end"]
    assert e2e and all("us_rounds" not in c for g in e2e for c in g["results"].values())


def test_ours_failing_fails_the_command(tmp_path, monkeypatch):
    ours = peers.PEERS["ours"]
    monkeypatch.setitem(
        peers.PEERS,
        "ours",
        peers.Peer("ours", ours.label, "torch", None, _flaky(100), "test double"),
    )
    cfg = _small(tmp_path, implementations=["ours", "torch"])
    cfg["host"]["enabled"] = cfg["curves"]["enabled"] = False
    code, text = _run(cfg)
    assert code == 1
    assert "FAIL" in text and "3x200" in text
    assert (tmp_path / "bench.json").exists()  # the figures of the shapes that ran are kept


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bench_on_gpu(tmp_path):
    code = run_cli(
        "bench",
        f"benchmark.out_dir={tmp_path}",
        "benchmark.shapes=[{m:128,n:257,dtype:float32},{m:1024,n:4096,dtype:bfloat16}]",
        "benchmark.curves.n.elements=4194304",
        "benchmark.curves.n.values=[1024,4096]",
        "benchmark.curves.m.values=[256]",
        "benchmark.host.calls=50",
        "benchmark.timing.end_to_end.warmup_ms=5",
        "benchmark.timing.end_to_end.rep_ms=10",
        "benchmark.copy_bytes=67108864",
    )
    assert code == 0
    payload = read_json(tmp_path / "bench.json")
    assert all(c["status"] == "ok" and c["gb_per_s"] > 0 for c in payload["copy_ceiling"].values())
    for g in payload["groups"]:
        assert set(g["results"]) == {"ours", "torch", "compile", "liger", "quack"}
        assert g["results"]["ours"]["status"] == "ok"
        if g["mode"] in ("graph", "end_to_end") and g["best_peer"] is not None:
            assert g["ours_vs_best_peer"] > 0
    assert (tmp_path / "bench_curves_graph.png").read_bytes()[:8] == PNG
