"""`fedsentry bench rounds`: what one aggregation costs the coordinator as the federation grows.

The server step runs once per round for the clients that answered; its cost must follow the sampled
clients, not the size of the federation (FedMM keeps a row per client for its control variates and
updates only the sampled rows and its running sums). Uploads are computed from random second moments by
the algorithm's own client step, so the server sees exactly what it would in a job."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

import numpy as np

from fedsentry.output import write_results
from models.pca import FEDERATED
from models.rounds import sample_clients


def server_round_seconds(algorithm: str, n_clients: int, sampled: int, rounds: int, d: int, rank: int,
                         seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    alg = FEDERATED[algorithm](n_features=d, rank=rank)
    t0 = time.perf_counter()
    server, broadcast = alg.init_server(n_clients, rng)
    server = alg.attach_bounds(server, np.full((n_clients, d), float(d)), np.full(n_clients, float(d)))
    init = time.perf_counter() - t0
    A = rng.standard_normal((sampled, d, d))
    data = {"C": A @ np.swapaxes(A, 1, 2) / d, "weight": np.ones(sampled)}
    data["C"] *= d / np.trace(data["C"], axis1=1, axis2=2)[:, None, None]  # trace d, as after standardising
    from coordinator import row_tables
    from coordinator.db import pack

    times, stored = [], []
    for _ in range(rounds):
        ids = sample_clients(rng, n_clients, sampled / n_clients)
        state = alg.init_clients(data, broadcast)
        _, uploads = alg.client_update(state, data, broadcast)
        t0 = time.perf_counter()
        server, broadcast = alg.server_update(server, ids, uploads, np.ones(len(ids)))
        times.append(time.perf_counter() - t0)
        # what the coordinator writes for this round: the small arrays whole, row tables by changed chunk
        small = pack({k: v for k, v in server.items() if k not in alg.row_tables})
        chunks = row_tables.changed(server, list(alg.row_tables), alg.touched(server, ids))
        stored.append(len(small) + sum(len(data) for _, _, data in chunks))
    table_mb = sum(v.nbytes for k, v in server.items() if k in alg.row_tables) / 2**20
    return {"algorithm": algorithm, "clients": n_clients, "sampled": sampled, "features": d, "rank": rank,
            "median_round_seconds": float(np.median(times)), "max_round_seconds": float(np.max(times)),
            "init_seconds": init, "client_tables_mib": table_mb, "stored_bytes_per_round": float(np.median(stored)),
            "whole_state_bytes": len(pack(server))}


def run(args: argparse.Namespace) -> int:
    rows = [server_round_seconds(a, n, args.sampled, args.rounds, args.features, args.rank)
            for n in args.clients for a in FEDERATED]
    doc = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), "rows": rows}
    write_results(args.out, "rounds.md", markdown(doc), doc, args.json)
    return 0


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"`{doc['command']}`", "", "Server step of one round (the coordinator's aggregation), median and worst "
             "over the rounds; row tables are the server's arrays that grow with the federation; stored per round is "
             "what the coordinator writes to its database for the round (small arrays whole, row tables only in the "
             "8 KiB chunks holding changed rows), against the whole state it used to write.", "",
             "| algorithm | clients | sampled | d | rank | median s/round | max s/round | row tables "
             "| stored per round | whole state |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["rows"]:
        lines.append(f"| {r['algorithm']} | {r['clients']:,} | {r['sampled']} | {r['features']} | {r['rank']} | "
                     f"{r['median_round_seconds']:.5f} | {r['max_round_seconds']:.5f} | "
                     f"{r['client_tables_mib']:.0f} MiB | {r['stored_bytes_per_round'] / 1024:,.0f} KiB | "
                     f"{r['whole_state_bytes'] / 2**20:,.1f} MiB |")
    return "\n".join(lines) + "\n"
