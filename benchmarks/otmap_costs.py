"""Issue 26 point 6 for the otmap family: upload size, one agent step (the mean parameter gradient of f_omega) on
50,000 records on one core, and the server step with 100 uploads (1,000 devices, 10 % a round). Writes
benchmarks/results/otmap-costs.json and .md.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_costs.py"""

from __future__ import annotations

import json
import timeit
from pathlib import Path
from typing import Any

import numpy as np

from models.otmap.fedmm import FedMMOT
from models.otmap.objective import source_grad


def best(f: Any, repeat: int) -> float:
    """The fastest of `repeat` runs, in seconds."""
    return min(timeit.repeat(f, number=1, repeat=repeat))


def costs(d: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    alg = FedMMOT(d)  # the defaults: 64 hidden units, ten Adam steps for theta on 1,024 records of Q
    server, broadcast = alg.init_server(1000, rng)
    server, broadcast = alg.attach_fleet(server, np.ones(1000), 0.1)
    server = alg.attach_target(server, rng.standard_normal((20_000, d)))
    X = rng.standard_normal((50_000, d))
    agent = best(lambda: source_grad(alg.layout, broadcast["omega"], X), 3)
    ids = np.arange(100)
    uploads = {"grad": rng.standard_normal((100, alg.layout.size)) * 0.01}
    server_s = best(lambda: alg.server_update(server, ids, uploads, np.ones(100)), 3)
    return {"features": d, "upload_bytes": alg.upload_bytes(), "agent_step_s_50k": agent,
            "server_step_ms_100_uploads": 1000 * server_s}


def main() -> None:
    rows = [costs(d) for d in (22, 34)]  # ton-iot's and nsl-kdd's features
    out = Path("benchmarks/results")
    (out / "otmap-costs.json").write_text(json.dumps(rows, indent=1))
    lines = ["# otmap costs (issue 26 point 6; one core)", "",
             "`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/otmap_costs.py`", "",
             "| features | upload (bytes; target <= 262,144) | agent step on 50,000 records (s; <= 1) | "
             "server step, 100 of 1,000 devices (ms; <= 5) |", "|---|---|---|---|"]
    lines += [f"| {r['features']} | {r['upload_bytes']:,} | {r['agent_step_s_50k']:.3f} | "
              f"{r['server_step_ms_100_uploads']:.1f} |" for r in rows]
    (out / "otmap-costs.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
