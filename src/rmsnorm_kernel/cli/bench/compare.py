"""Turn timings into the figures the benchmark reports: GB/s, % of the copy ceiling, ratios.

Bytes per call count each (M, N) tensor a pass must touch once, at ``s`` bytes per element
(``s`` = x's element size; the weight and per-row statistics are left out):

- forward: read x, write y -> ``2 * M * N * s``;
- forward + backward: that, then read x and dy, write dx -> ``5 * M * N * s``.

Every implementation is charged the same bytes, so GB/s is a rescaled latency that can be
compared across implementations, shapes and with the copy ceiling (a device-to-device copy,
bytes read + written).

Ratios compare ours with the best *peer* (fastest implementation other than ours that ran) in
the same run, pass and mode: ``ours_vs_best_peer = best peer time / our time``, so above 1.0 we
are faster. ``ours_vs`` gives the same ratio against every peer.
"""

from __future__ import annotations

from collections.abc import Mapping

PASS_TRAFFIC = {"forward": 2, "forward_backward": 5}  # (M, N) tensors read or written per call


def traffic_bytes(m: int, n: int, element_size: int, pass_: str) -> int:
    return PASS_TRAFFIC[pass_] * m * n * element_size


def gb_per_s(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9


def _ok(result: Mapping) -> bool:
    return result.get("status") == "ok"


def rank(
    results: Mapping[str, Mapping], ours: str, metric: str
) -> tuple[str | None, float | None, dict[str, float]]:
    """Best peer on ``metric`` (lower is better), ours' ratio to it, and ours' ratio to each peer.

    Returns ``(best peer name, best peer / ours, {peer: peer / ours})``; ratios are ``None`` or
    absent where ours or the peer did not run.
    """
    peers = {k: r[metric] for k, r in results.items() if k != ours and _ok(r)}
    mine = results.get(ours, {})
    mine_value = mine.get(metric) if _ok(mine) else None
    best = min(peers, key=peers.get) if peers else None
    if mine_value is None or mine_value <= 0:
        return best, None, {}
    ratios = {k: v / mine_value for k, v in peers.items()}
    return best, (ratios[best] if best is not None else None), ratios


def add_ratios(group: dict, ours: str, metric: str) -> dict:
    """Set ``best_peer``, ``ours_vs_best_peer`` and ``ours_vs`` on ``metric`` (lower is better).

    For times this is a speed-up; for peak memory, above 1.0 means we allocate less.
    """
    best, ratio, ratios = rank(group["results"], ours, metric)
    group["best_peer"] = best
    group["ours_vs_best_peer"] = ratio
    group["ours_vs"] = ratios
    return group


def summarise_timing(group: dict, ours: str, copy_gb_per_s: float | None) -> dict:
    """Add GB/s, % of copy ceiling per implementation and the ratios to a timing group, in place.

    ``group``: ``{"bytes": int, "results": {impl: {"status", "us"?}}, ...}``.
    """
    for r in group["results"].values():
        if _ok(r):
            r["gb_per_s"] = gb_per_s(group["bytes"], r["us"])
            r["pct_of_copy"] = 100.0 * r["gb_per_s"] / copy_gb_per_s if copy_gb_per_s else None
    return add_ratios(group, ours, "us")
