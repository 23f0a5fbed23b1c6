"""A synthetic language-modelling task: token sequences from a seeded Markov chain.

Nothing is downloaded. ``make_markov_splits`` draws a sparse transition table from the dataset
seed (each token has ``successors`` possible next tokens, with uneven probabilities), then walks
the chain. A model that learns the table predicts the next token with the chain's entropy
(``entropy_floor``, well under ``log(vocab_size)``): the loss curve has somewhere to go.

Every draw is float64 from one CPU ``torch.Generator`` (inverse-CDF sampling: ``rand`` then
``searchsorted``, no ``multinomial``), so the splits are bitwise identical across runs, branches
and machines that share the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..core.data import SPLITS, SplitsDataModule

_ROW_BLOCK = 512  # rows of the transition scores drawn at once (512 x V float64)


def transition_table(
    vocab_size: int, successors: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(next_tokens (V, k) int64, cdf (V, k) float64)``: token ``s`` is followed by
    ``next_tokens[s, j]`` with probability ``cdf[s, j] - cdf[s, j - 1]``.

    Probabilities are ``softmax(2 * N(0, 1))`` over the ``k`` successors: uneven, so the chain's
    entropy sits well between 0 and ``log k``.
    """
    # k distinct successors per token: the k smallest of V uniform scores, drawn in row blocks so
    # a large vocabulary never holds a (V, V) table (the draws are the same as one big table's).
    blocks = []
    for start in range(0, vocab_size, _ROW_BLOCK):
        rows = min(_ROW_BLOCK, vocab_size - start)
        scores = torch.rand(rows, vocab_size, generator=generator, dtype=torch.float64)
        blocks.append(scores.topk(successors, dim=1, largest=False).indices)
    next_tokens = torch.cat(blocks)  # (V, k)
    logits = 2.0 * torch.randn(vocab_size, successors, generator=generator, dtype=torch.float64)
    probs = logits.softmax(dim=1)
    cdf = probs.cumsum(dim=1)
    cdf[:, -1] = 1.0  # exactly 1: searchsorted never runs past the last successor
    return next_tokens, cdf


def walk(
    next_tokens: torch.Tensor, cdf: torch.Tensor, n: int, length: int, generator: torch.Generator
) -> torch.Tensor:
    """``(n, length)`` int64: ``n`` independent walks of the chain from uniform start tokens."""
    vocab_size = next_tokens.shape[0]
    out = torch.empty(n, length, dtype=torch.int64)
    state = torch.randint(vocab_size, (n,), generator=generator)
    out[:, 0] = state
    rows = torch.arange(n)
    for t in range(1, length):
        u = torch.rand(n, 1, generator=generator, dtype=torch.float64)  # (n, 1)
        choice = torch.searchsorted(cdf[state], u).squeeze(1)  # (n,) index into the k successors
        state = next_tokens[state, choice.clamp_(max=next_tokens.shape[1] - 1)]
        out[rows, t] = state
    return out


def entropy_floor(cdf: torch.Tensor, tokens: torch.Tensor) -> float:
    """The chain's next-token entropy (nats), weighted by how often each token occurs in
    ``tokens``: the lowest mean cross-entropy a model can reach on that data."""
    probs = torch.diff(cdf, dim=1, prepend=torch.zeros_like(cdf[:, :1]))
    row_entropy = -(probs * probs.clamp_min(1e-300).log()).sum(dim=1)  # (V,)
    counts = torch.bincount(tokens[:, :-1].reshape(-1), minlength=cdf.shape[0]).double()
    return float((counts * row_entropy).sum() / counts.sum())


def make_markov_splits(cfg: Mapping[str, Any]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Train/val/test splits of the task described by ``cfg``.

    Args:
        cfg: a mapping with ``vocab_size``, ``successors``, ``seq_len``, ``n_train``, ``n_val``,
            ``n_test`` and ``seed`` (other keys ignored).

    Returns:
        ``{"train" | "val" | "test": (inputs (n, seq_len) int64, targets (n, seq_len) int64)}``,
        targets being the inputs shifted left by one token.
    """
    vocab_size, successors = int(cfg["vocab_size"]), int(cfg["successors"])
    seq_len = int(cfg["seq_len"])
    if not 1 <= successors <= vocab_size:
        raise ValueError(
            f"dataset.successors must be in [1, vocab_size={vocab_size}] (got {successors})"
        )
    if seq_len < 1:
        raise ValueError(f"dataset.seq_len must be >= 1 (got {seq_len})")
    g = torch.Generator().manual_seed(int(cfg["seed"]))
    next_tokens, cdf = transition_table(vocab_size, successors, g)
    splits = {}
    for name in SPLITS:  # fixed order: each split's draws follow the previous split's
        tokens = walk(next_tokens, cdf, int(cfg[f"n_{name}"]), seq_len + 1, g)
        splits[name] = (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    return splits


class MarkovLMDataModule(SplitsDataModule):
    """Serves :func:`make_markov_splits` as ``(inputs (B, S) int64, targets (B, S) int64)`` (see
    :class:`~rmsnorm_kernel.experiment.core.data.SplitsDataModule` for the batch order, resume,
    DDP and ``**splits``). ``entropy_floor`` (nats) is the best mean cross-entropy reachable on
    the test split, logged for reference.
    """

    def __init__(
        self,
        vocab_size: int,
        successors: int,
        seq_len: int,
        **splits: Any,
    ) -> None:
        super().__init__(**splits)
        self.entropy_floor: float | None = None

    @property
    def tokens_per_batch(self) -> int:
        return int(self.hparams.batch_size) * int(self.hparams.seq_len)

    def make_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        splits = make_markov_splits(self.hparams)
        g = torch.Generator().manual_seed(int(self.hparams.seed))
        _, cdf = transition_table(self.hparams.vocab_size, self.hparams.successors, g)
        inputs, targets = splits["test"]
        self.entropy_floor = entropy_floor(cdf, torch.cat([inputs, targets[:, -1:]], 1))
        return splits
