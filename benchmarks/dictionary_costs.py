"""Issue 26 point 6 for the dict detector: upload size, one agent step on 50,000 records (one core), the server
step at 1,000 devices (10 % a round), and scoring throughput per core. Writes benchmarks/results/
dictionary-costs.json and .md (agent memory: `fedsentry bench agent-memory --detector dict`).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/dictionary_costs.py"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.cli import build_parser
from fedsentry.runs.detection import prepare
from models.core.messages import Upload
from models.dictionary.fedmm import FedMMDictionary
from models.dictionary.simulator import simulate_dictionary
from wire.messages import envelope


def best(f: Any, repeat: int) -> float:
    """The fastest of `repeat` runs, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    logging.disable(logging.WARNING)
    args = build_parser().parse_args(["simulate", "pca", "--detector", "dict", "--dataset", "nsl-kdd"])
    data, split, parts = prepare(args)
    r = simulate_dictionary(parts, split.X_test, split.y_test, data.feature_names, rounds=100, fraction=0.1)
    det = r["detector"]
    d = len(data.feature_names)
    rng = np.random.default_rng(0)
    records = split.X_train[rng.integers(0, len(split.X_train), 50_000)]
    Z = det.preprocessor_.transform(records).astype(np.float32)
    out: dict[str, Any] = {"dataset": "nsl-kdd", "features": d, "atoms": det.components_.shape[1],
                           "command": "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python "
                                      "benchmarks/dictionary_costs.py"}
    # uploads: the algorithm's payload and the encoded envelope an agent publishes
    for bits in (None, 8):
        alg = FedMMDictionary(d, bits=bits)
        server, _ = alg.init_server(1000, rng)
        server, broadcast = alg.attach_fleet(server, np.ones(1000), 0.1)
        data_1 = {"X": np.empty(1, dtype=object)}
        data_1["X"][0] = Z
        state = alg.init_clients(data_1, broadcast)
        broadcast = {**broadcast, "theta": det.components_}
        step = best(lambda: alg.client_update(state, data_1, broadcast), 3)  # noqa: B023
        _, up = alg.client_update(state, data_1, broadcast)
        env = envelope(Upload(arrays={k: v[0] for k, v in up.items()}), "job-1", 1, "dev-0001")
        out[f"bits_{bits or 64}"] = {"upload_payload_bytes": alg.upload_bytes(),
                                     "envelope_bytes": len(env.encode()),
                                     "agent_step_seconds_50000_records": step}
        # the server step at 1,000 devices, 100 answering a round, after every device has answered once
        uploads = {k: np.repeat(v, 100, axis=0) for k, v in up.items()}
        for start in range(0, 1000, 100):
            alg.server_update(server, np.arange(start, start + 100), uploads, np.ones(100))
        ids = np.sort(rng.choice(1000, 100, replace=False))
        out[f"bits_{bits or 64}"]["server_step_seconds_1000_devices"] = best(
            lambda: alg.server_update(server, ids, uploads, np.ones(100)), 20)  # noqa: B023
        out[f"bits_{bits or 64}"]["server_screen_seconds_1000_devices"] = best(
            lambda: alg.screen(server, ids, uploads), 20)  # noqa: B023
    X = split.X_test[rng.integers(0, len(split.X_test), 200_000)]
    seconds = best(lambda: det.score_samples(X), 3)
    out["scoring_records_per_second"] = len(X) / seconds
    Path("benchmarks/results/dictionary-costs.json").write_text(json.dumps(out, indent=1))
    b64, b8 = out["bits_64"], out["bits_8"]
    md = ["# dict: costs (issue 26, point 6)", "", f"    {out['command']}", "",
          f"nsl-kdd, {d} features, {out['atoms']} atoms, one core.", "",
          "| | float64 uploads | 8-bit uploads |", "|---|---:|---:|",
          f"| upload payload (bytes) | {b64['upload_payload_bytes']} | {b8['upload_payload_bytes']} |",
          f"| upload envelope on the wire (bytes) | {b64['envelope_bytes']} | {b8['envelope_bytes']} |",
          f"| agent step, 50,000 records (s) | {b64['agent_step_seconds_50000_records']:.3f} | "
          f"{b8['agent_step_seconds_50000_records']:.3f} |",
          f"| server step, 1,000 devices, 100 answering (ms) | {1e3 * b64['server_step_seconds_1000_devices']:.2f} | "
          f"{1e3 * b8['server_step_seconds_1000_devices']:.2f} |",
          f"| upload checks (screen), 100 uploads (ms) | {1e3 * b64['server_screen_seconds_1000_devices']:.2f} | "
          f"{1e3 * b8['server_screen_seconds_1000_devices']:.2f} |", "",
          f"Scoring: {out['scoring_records_per_second']:,.0f} records/s on one core (float32 FISTA, "
          f"{det.score_steps} iterations, in place).",
          "", "Agent memory: benchmarks/results/agent-memory-dict.md.", ""]
    Path("benchmarks/results/dictionary-costs.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
