"""`fedsentry bench rounds`: what one aggregation costs the coordinator as the federation grows.

The server step runs once per round for the clients that answered; its cost must follow the sampled
clients, not the size of the federation (FedMM keeps a row per client for its control variates and
updates only the sampled rows and its running sums). Uploads are computed from random second moments by
the algorithm's own client step, so the server sees exactly what it would in a job."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import sys
import time
from typing import Any

import numpy as np

from fedsentry.errors import UsageError
from fedsentry.output import write_results
from models.core.federated import FederatedAlgorithm
from models.core.rounds import Rounds
from models.pca import FEDERATED


def stored_bytes(alg: FederatedAlgorithm, server: dict[str, np.ndarray], ids: np.ndarray) -> int:
    """What the coordinator writes for a round: the small arrays whole, the row tables by the chunks holding the
    rows the round changed (of the rows in use)."""
    from store import row_tables
    from store.db import pack

    small = pack({k: v for k, v in server.items() if k not in alg.row_tables})
    chunks = row_tables.changed(server, list(alg.row_tables), alg.touched(server, ids), alg.table_lengths(server))
    return len(small) + sum(len(c) for _, _, c in chunks)


def server_round_seconds(algorithm: str, n_clients: int, sampled: int, rounds: int, d: int, rank: int,
                         seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    alg = FEDERATED[algorithm](n_features=d, rank=rank)
    t0 = time.perf_counter()
    loop = Rounds.start(alg, n_clients, sampled / n_clients, rng)
    loop.server = alg.attach_bounds(loop.server, np.full((n_clients, d), float(d)), np.full(n_clients, float(d)))
    init = time.perf_counter() - t0
    A = rng.standard_normal((sampled, d, d))
    data = {"C": A @ np.swapaxes(A, 1, 2) / d, "weight": np.ones(sampled)}
    data["C"] *= d / np.trace(data["C"], axis1=1, axis2=2)[:, None, None]  # trace d, as after standardising
    from store.db import pack

    times, stored = [], []
    for _ in range(rounds):
        ids = loop.sample()
        state = alg.init_clients(data, loop.broadcast)
        _, uploads = alg.client_update(state, data, loop.broadcast)
        t0 = time.perf_counter()
        loop.close(ids, uploads, np.ones(len(ids)))
        times.append(time.perf_counter() - t0)
        server = loop.server
        stored.append(stored_bytes(alg, server, ids))
    table_mb = sum(v.nbytes for k, v in server.items() if k in alg.row_tables) / 2**20
    return {"algorithm": algorithm, "clients": n_clients, "sampled": sampled, "features": d, "rank": rank,
            "median_round_seconds": float(np.median(times)), "max_round_seconds": float(np.max(times)),
            "init_seconds": init, "client_tables_mib": table_mb, "stored_bytes_per_round": float(np.median(stored)),
            "whole_state_bytes": len(pack(server))}


def mixture_round_seconds(n_clients: int, sampled: int, rounds: int, d: int, components: int,
                          seed: int = 0) -> dict[str, Any]:
    """FedEM's server step (validation, the table of control variates, the M-step) in a process of its own:
    rounds until the table is full (every row written once) and `rounds` more, the peak memory of the process
    (VmHWM) at the end. Uploads are the honest statistics of a pool of devices (their own k-means rounds), each
    sampled device answering with one of them and the moments it claimed."""
    from fedsentry.bench.agent_memory import status
    from models.mixture.fedem import FedEM
    from models.mixture.simulator import device_data, device_moments

    rng = np.random.default_rng(seed)
    alg = FedEM(d, components=components)
    pool = [rng.standard_normal((400, d)) @ rng.standard_normal((d, d)) * 0.3 + rng.standard_normal(d)
            for _ in range(sampled)]
    data = device_data(pool, seed)
    mean, mean_sq = device_moments([np.asarray(x, float) for x in data["X"]])
    t0 = time.perf_counter()
    loop = Rounds.start(alg, n_clients, sampled / n_clients, rng)
    who = np.arange(n_clients) % sampled  # each device answers as one of the pool
    loop.server = alg.attach_bounds(loop.server, mean[who], mean_sq[who])
    init = time.perf_counter() - t0
    _, up = alg.client_update({}, data, loop.broadcast)
    loop.close(np.arange(sampled), up, np.ones(sampled))  # seeding
    _, up = alg.client_update({}, data, loop.broadcast)
    capacity = len(loop.server["owner"])
    fill = -(-min(capacity, n_clients) // sampled)
    times, stored, order = [], [], rng.permutation(n_clients)
    for r in range(fill + rounds):
        # first every row of the table once (devices not seen before), then the usual sampling
        ids = np.sort(order[r * sampled:(r + 1) * sampled]) if r < fill else loop.sample()
        answers = {k: v[who[ids]] for k, v in up.items()}
        t = time.perf_counter()
        loop.close(ids, answers, np.ones(len(ids)))
        times.append(time.perf_counter() - t)
        server = loop.server
        if r >= fill:
            stored.append(stored_bytes(alg, server, ids))
    server = loop.server
    mem = status(os.getpid())
    steady = times[fill:]
    m_steps = []
    for _ in range(rounds):  # the M-step alone on the last aggregate: the step's floor whatever the fleet
        t = time.perf_counter()
        alg.aggregate(server)
        m_steps.append(time.perf_counter() - t)
    return {"algorithm": "fedem", "clients": n_clients, "sampled": sampled, "features": d, "components": components,
            "table_rows": capacity, "rows_in_use": int(server["rows"]), "fill_rounds": fill,
            "median_round_seconds": float(np.median(steady)), "max_round_seconds": float(np.max(steady)),
            "fill_median_round_seconds": float(np.median(times[:fill])),
            "fill_max_round_seconds": float(np.max(times[:fill])), "init_seconds": init,
            "m_step_seconds": float(np.median(m_steps)),
            "client_tables_mib": sum(v.nbytes for k, v in server.items() if k in alg.row_tables) / 2**20,
            "stored_bytes_per_round": float(np.median(stored)), "peak_mib": mem.get("VmHWM", float("nan")),
            "rss_mib": mem.get("VmRSS", float("nan"))}


def _in_own_process(args: tuple[int, int, int, int, int]) -> dict[str, Any]:
    return mixture_round_seconds(*args)


def check_mixture(features: int, components: int) -> None:
    """UsageError unless FedEM takes these settings and one upload fits a message (what an agent could send)."""
    from models.mixture.fedem import FedEM
    from wire.protocol import MAX_PAYLOAD

    try:
        alg = FedEM(features, components=components)
    except ValueError as e:
        raise UsageError(f"--components {components}: {e}") from None
    if alg.upload_bytes() > MAX_PAYLOAD:
        raise UsageError(f"--mixture-features {features} with --components {components}: one upload would be "
                         f"{alg.upload_bytes() / 2**20:,.0f} MiB, more than a message carries "
                         f"({MAX_PAYLOAD // 2**20} MiB)")


def run(args: argparse.Namespace) -> int:
    check_mixture(args.mixture_features, args.components)  # before anything runs
    rows = [server_round_seconds(a, n, args.sampled, args.rounds, args.features, args.rank)
            for n in args.clients for a in FEDERATED]
    mixtures = []
    ctx = multiprocessing.get_context("spawn")  # a fresh process per size: its own peak memory
    for n in args.clients:
        with ctx.Pool(1) as pool:
            mixtures.append(pool.map(_in_own_process, [(n, args.sampled, args.rounds, args.mixture_features,
                                                        args.components)])[0])
    doc = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), "rows": rows, "mixtures": mixtures}
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
    if doc.get("mixtures"):
        lines += ["", "FedEM (gmm) at the default components for its features: the server step validates each upload, "
                  "replaces the device's row in the table of control variates (models.mixture.control: at most "
                  "TABLE_BUDGET bytes of rows, allocated once; beyond, the devices seen longest ago leave) and takes "
                  "the M-step. Timed over the rounds after the table is full; filling is each row's first write (the "
                  "pages the table's memory takes). M-step is the median of the M-step alone (K eigendecompositions "
                  "and Cholesky factors of d x d covariances), timed on the last aggregate: the part of the step no "
                  "bookkeeping removes. Peak is the VmHWM of a process that ran only this.", "",
                  "| clients | sampled | d | K | table rows | median s/round | max s/round | M-step s "
                  "| filling median / max | row tables | stored per round | peak memory |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in doc["mixtures"]:
            lines.append(f"| {r['clients']:,} | {r['sampled']} | {r['features']} | {r['components']} | "
                         f"{r['table_rows']:,} | {r['median_round_seconds']:.4f} | {r['max_round_seconds']:.4f} | "
                         f"{r.get('m_step_seconds', float('nan')):.4f} | "
                         f"{r['fill_median_round_seconds']:.4f} / {r['fill_max_round_seconds']:.4f} | "
                         f"{r['client_tables_mib']:,.0f} MiB | {r['stored_bytes_per_round'] / 1024:,.0f} KiB | "
                         f"{r['peak_mib']:,.0f} MiB |")
    return "\n".join(lines) + "\n"
