"""The synthetic language-modelling task: deterministic, shifted targets, learnable structure."""

from __future__ import annotations

import math

import pytest
import torch

from rmsnorm_kernel.experiment.lm.data import (
    MarkovLMDataModule,
    make_markov_splits,
    transition_table,
)

CFG = {
    "vocab_size": 64,
    "successors": 3,
    "seq_len": 12,
    "n_train": 40,
    "n_val": 8,
    "n_test": 8,
    "seed": 7,
}


def test_splits_are_bitwise_deterministic_and_seeded():
    a, b = make_markov_splits(CFG), make_markov_splits(CFG)
    other = make_markov_splits({**CFG, "seed": 8})
    for name in ("train", "val", "test"):
        for x, y in zip(a[name], b[name], strict=True):
            assert torch.equal(x, y)
    assert not torch.equal(a["train"][0], other["train"][0])


def test_shapes_and_targets_are_the_next_tokens():
    splits = make_markov_splits(CFG)
    for name, n in (("train", 40), ("val", 8), ("test", 8)):
        inputs, targets = splits[name]
        assert inputs.shape == targets.shape == (n, 12)
        assert inputs.dtype == targets.dtype == torch.int64
        assert torch.equal(inputs[:, 1:], targets[:, :-1])
        assert 0 <= int(inputs.min()) and int(inputs.max()) < 64


def test_every_transition_is_one_of_the_tables_successors():
    """The structure a model can learn: each token is followed by one of its 3 successors."""
    splits = make_markov_splits(CFG)
    next_tokens, cdf = transition_table(64, 3, torch.Generator().manual_seed(7))
    assert torch.equal(cdf[:, -1], torch.ones(64, dtype=torch.float64))
    inputs, targets = splits["train"]
    allowed = (next_tokens[inputs] == targets.unsqueeze(-1)).any(-1)  # (n, S)
    assert bool(allowed.all())
    # k distinct successors per token
    assert all(len(set(row.tolist())) == 3 for row in next_tokens)


def test_entropy_floor_is_well_below_uniform():
    dm = MarkovLMDataModule(**CFG, batch_size=4, eval_batch_size=8)
    dm.setup()
    assert 0.0 < dm.entropy_floor < math.log(3) < math.log(64)
    assert dm.tokens_per_batch == 4 * 12
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (4, 12)


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("successors", 0, "dataset.successors"),
        ("successors", 65, "dataset.successors"),
        ("seq_len", 0, "dataset.seq_len"),
    ],
)
def test_bad_sizes_are_refused_by_name(key, value, match):
    with pytest.raises(ValueError, match=match):
        make_markov_splits({**CFG, key: value})
