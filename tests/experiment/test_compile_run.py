"""``model.compile`` / ``model.inductor_fusion``: the tiny Llama trained through a compiled net,
with the norm-fusion pass in that compile's options, against the same run eager."""

from __future__ import annotations

import json

import pytest
import torch
from experiment_helpers import compose_cfg, tiny_llama
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch._inductor import config as inductor_config

from rmsnorm_kernel import inductor_fusion
from rmsnorm_kernel.experiment.core.run import train
from rmsnorm_kernel.experiment.core.settings import SettingsError, check_train_config
from rmsnorm_kernel.paths import config_dir

STEPS = 3


def compose_llama(*overrides: str):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("train", overrides=["experiment=llama", *overrides])


def tiny(root, run: str) -> list[str]:
    return [*tiny_llama(root, run, STEPS), "~logger"]


def test_compiled_run_with_the_pass_trains_like_eager(tmp_path, fresh_inductor):
    before = dict(inductor_fusion.REWRITES)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, extra in (("eager", []), ("compiled", ["model.compile=true"])):
            fusion = ["model.inductor_fusion=true"] if extra else []
            train(compose_llama(*tiny(tmp_path, name), "norm=triton", *extra, *fusion))
    finally:
        torch.set_num_threads(threads)
    eager, compiled = (
        json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("eager", "compiled")
    )
    done = {k: inductor_fusion.REWRITES[k] - before[k] for k in before}
    assert done["forward_residual"] > 0 and done["backward_accumulate"] > 0, done
    assert inductor_config.post_grad_custom_post_pass is None, "the pass stays in its compile"
    for m in (eager, compiled):  # every norm call went through the kernels, compiled or not
        assert m["forward_calls"] == m["backward_calls"] == m["expected_calls"] > 0
        assert m["reload_max_diff"] == 0.0
    # Rounding-level: Inductor fuses the float32 elementwise work around the kernels (and on a
    # GPU may pick other matmul kernels), so the two runs differ in summation order only; the
    # tiny model's own loss criterion between branches is 1e-2 (conf/compare/lm.yaml).
    assert compiled["test/loss"] == pytest.approx(eager["test/loss"], rel=1e-4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.inductor_fusion=true"], "needs model.compile=true"),
        (["model.compile=yes"], "model.compile must be true or false"),
    ],
)
def test_compile_switches_are_checked_first(overrides, message, tmp_path):
    cfg = compose_llama(*tiny(tmp_path, "bad"), *overrides)
    with pytest.raises(SettingsError, match=message):
        check_train_config(cfg)
    with pytest.raises(Exception, match=message.split("=")[0]):
        instantiate(cfg.model)  # built directly, the module says the same
    assert not (tmp_path / "bad").exists()


def test_every_run_of_a_sweep_compiles_alike(tmp_path):
    """Runs in one process (a Hydra multirun) build their nets from one class, so their graphs
    shared one Dynamo cache list: from the third compiled run, Dynamo's recompile limit sent runs
    back to eager without an error. Each compiled run starts from an empty cache now: every run
    leaves the same number of compiled graphs, none near the limit."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from rmsnorm_kernel.experiment.mlp.net import MLP

    limit = torch._dynamo.config.recompile_limit
    graphs = []
    for i, norm in enumerate(("torch", "reference", "torch", "reference")):
        cfg = compose_cfg(
            [f"norm={norm}", "model.compile=true", "~logger", "trainer.max_steps=3"],
            tmp_path / str(i),
        )
        train(cfg)
        graphs.append(len(_debug_get_cache_entry_list(MLP.forward.__code__)))
    assert graphs[0] > 0, "the net ran compiled"
    assert graphs == [graphs[0]] * 4 and graphs[0] < limit, graphs
