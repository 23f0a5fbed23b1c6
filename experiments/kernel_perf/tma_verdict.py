"""Read a ``tune.py --parts tmapkg`` or ``--parts tmacand`` JSON and say, per row width and
dtype, whether the TMA backward was at least as fast as the pointer heuristic at every M measured
(within NOISE): the rule for a plan to join (or stay in) ``config.BWD_TMA``, whose plans apply
from ``TMA_MIN_M`` rows up.

    python3 experiments/kernel_perf/tma_verdict.py RESULT.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

#: One shape timed twice in one run differs by up to ~1% in graph replay (the bench's note says
#: 2-3% across its tables): a TMA time within this of the pointer time counts as a tie.
NOISE = 0.01
PARTS = ("tmapkg", "tmacand")


def verdicts(rows: list[dict]) -> dict[tuple[int, str], dict]:
    """``{(N, dtype): {"times": {M: (pointer us, tma us)}, "wins_everywhere": bool}}``."""
    times: dict[tuple[int, str], dict[int, dict[str, float]]] = defaultdict(dict)
    for row in rows:
        if row.get("part") not in PARTS:
            continue
        kind, dtype = row["variant"].split()[:2]
        times[(row["N"], dtype)].setdefault(row["M"], {})[kind] = row["us"]
    out = {}
    for key, by_m in sorted(times.items()):
        pairs = {m: (t["pointer"], t["tma"]) for m, t in sorted(by_m.items()) if len(t) == 2}
        out[key] = {
            "times": pairs,
            "wins_everywhere": bool(pairs)
            and all(ptr / tma >= 1 - NOISE for ptr, tma in pairs.values()),
        }
    return out


def main(path: str) -> None:
    with open(path) as f:
        result = json.load(f)
    for (n, dtype), v in verdicts(result["rows"]).items():
        cells = ", ".join(
            f"M={m}: {ptr:.1f} -> {tma:.1f} ({ptr / tma:.3f}x)"
            for m, (ptr, tma) in v["times"].items()
        )
        verdict = "adopt" if v["wins_everywhere"] else "keep the pointer kernel"
        print(f"N={n} {dtype}: {verdict}\n  {cells}")


if __name__ == "__main__":
    main(sys.argv[1])
