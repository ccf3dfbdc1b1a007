"""The otmap job's round messages, encoded as the coordinator publishes them (issue 26; the quantile start's map
travels once): a real job (fedsentry.runs.loopback: the job runner and the agents' participants, real envelopes)
at 22 and 34 features (ton-iot's and nsl-kdd's), the algorithm's defaults, 4 devices of 300 log-normal records,
a gmm promoted first. Writes benchmarks/results/otmap-round-bytes.json and .md.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_round_bytes.py"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.runs.loopback import Loopback, detector_participants

DEVICES, RECORDS, ROUNDS = 4, 300, 30  # 30: the job's default rounds


def published(loop: Loopback) -> list[dict[str, Any]]:
    """Each round's phase and the size of the message that opened it (bytes, encoded)."""
    loop.start()
    out = []
    while True:
        out.append({"round": loop.runner.round, "phase": loop.runner.phase, "bytes": len(loop.outbox[-1])})
        if loop.step():
            return out


def measure(d: int) -> dict[str, Any]:
    rng = np.random.default_rng(d)
    features = [f"f{j}" for j in range(d)]
    parts = [np.exp(rng.normal(rng.normal(0, 1, d), 0.5, (RECORDS, d))) for _ in range(DEVICES)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        Loopback(folder, "gmm", "fedem", {"features": features, "rounds": 2, "fraction": 1.0, "seed": 0,
                                          "algorithm_params": {"components": 2}},
                 detector_participants(folder / "a", "gmm", features, parts), job="a").run()
        moved = [P * 1.5 for P in parts]
        loop = Loopback(folder, "otmap", "fedmm-ot", {"features": features, "rounds": ROUNDS, "fraction": 0.5,
                                                      "seed": 1, "target_records": 512},
                        detector_participants(folder / "b", "otmap", features, moved), job="b")
        rounds = published(loop)
    train = [r["bytes"] for r in rounds if r["phase"] == "train"]
    return {"features": d, "rounds": rounds, "first_train": train[0], "later_train": max(train[1:]),
            "train_total": sum(train), "job_total": sum(r["bytes"] for r in rounds)}


def main() -> None:
    rows = [measure(d) for d in (22, 34)]
    out = Path("benchmarks/results")
    (out / "otmap-round-bytes.json").write_text(json.dumps(rows, indent=1))
    lines = ["# otmap round messages (bytes, encoded)", "",
             "`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_round_bytes.py`", "",
             f"A job of {ROUNDS} training rounds (the default; fedmm-ot's defaults, the quantile start), "
             f"{DEVICES} devices.", "",
             "| features | first training round | each later training round | training rounds, total | "
             "whole job (stats, histogram, training) |", "|---|---|---|---|---|"]
    lines += [f"| {r['features']} | {r['first_train']:,} | {r['later_train']:,} | {r['train_total']:,} | "
              f"{r['job_total']:,} |" for r in rows]
    (out / "otmap-round-bytes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
