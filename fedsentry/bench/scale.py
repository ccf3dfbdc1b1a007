"""`fedsentry bench scale`: what a fleet of N devices costs the coordinator, per family (issue 27, point 8).

For every registered family (every algorithm of pca, the default algorithm of the others) a job runs through the
real job runner and real participants over a loopback (fedsentry.runs.loopback: real encoded envelopes, a real
database), with a sample of `--sample` devices and the job's default settings (fraction, rounds):

- round message: after the job, its participants are made N (the sample's ids and generated ones, each with the
  sample's median record count) and the runner samples a training round as it does in a job: the message it
  publishes is measured as encoded, so it follows whatever the round message carries (above
  models.core.sampling.LIST_MAX participants a draw instead of the sampled ids). Each device receives it:
  fan-out = message x N.
- uploads: the sample's real encoded training uploads; per round = their median x the devices that round samples
  at N.
- server step: training rounds asked of every sample device and of one, alternately (`--repeats` each, the
  fastest taken); per upload the time to accept one (decode, validate, digest) and store it for a takeover
  (round_uploads), and the slope of the round's close between the two; fixed = the one-device close less one slope.
  At N: fixed + uploads x (accept + slope), extrapolated linearly from the sample (the server state stays the
  sample's: how a step's time follows the size of tables that grow with the fleet is `bench rounds`' measure).
- alerts: rows stored per second through the coordinator's ingest (coordinator.ingest.AlertIngest: decoded alert
  batches, rows, one transaction per ALERT_BATCH), once per run, against the rate N devices send at
  `--alerts-per-device-hour`.
- memory: VmHWM of the process that ran every family at that N (one spawned process per N); beside it, the bytes of
  the server state each algorithm allocates for N devices (its row tables: pages a job writes as devices answer)."""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from fedsentry.errors import UsageError
from fedsentry.output import write_results

NOT_ALLOCATED = " (not allocatable here)"
#: rounds left to the job before the timed ones (seeding and the first steps differ from the steady rounds)
WARMUP = 3


def cases() -> list[tuple[str, str]]:
    """(family, algorithm) of every registered family: each algorithm of pca, the default algorithm of the others;
    the default detector first (a transport map is learnt for the model it promotes)."""
    from models.families import DEFAULT_DETECTOR, FAMILIES

    return [(name, a) for name, f in sorted(FAMILIES.items(), key=lambda kv: kv[0] != DEFAULT_DETECTOR)
            for a in (f.algorithms if name == "pca" else [f.spec.default_algorithm()])]


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import ArgumentError, OperationalError

    from fedsentry.bench.api import database
    from fedsentry.errors import database_error
    from store.db import is_postgresql

    if args.sample < 2:
        raise UsageError("--sample: at least 2 devices (a round of all and a round of one are compared)")
    if args.rounds is not None and args.rounds < WARMUP + 2 * args.repeats:
        raise UsageError(f"--rounds: at least {WARMUP + 2 * args.repeats} ({WARMUP} before the timed rounds, then "
                         f"--repeats {args.repeats} rounds of all the sample and of one device)")
    if args.db and not is_postgresql(args.db):
        raise UsageError("--db: a PostgreSQL server's URL, e.g. postgresql://postgres@127.0.0.1:5432/postgres "
                         "(without it: SQLite in a temporary folder)")
    db = args.db or "sqlite"
    try:
        with database(db, db != "sqlite") as url:
            alerts = alert_rows_per_s(url, args.alerts)
            ctx = multiprocessing.get_context("spawn")  # a fresh process per N: its own peak memory
            per_n = []
            for n in args.devices:
                with ctx.Pool(1) as pool:
                    per_n.append(pool.apply(at_fleet_size, (url, n, args.sample, args.repeats, args.data_dir,
                                                            args.rounds)))
    except (ArgumentError, OperationalError) as e:
        raise database_error("--db", e) from None
    doc = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), "cores": os.cpu_count(),
           "load_before": os.getloadavg()[0], "sample": args.sample, "repeats": args.repeats,
           "alerts_per_device_hour": args.alerts_per_device_hour, "alerts": alerts, "fleets": per_n}
    for f in per_n:
        f["alerts_needed_per_s"] = f["devices"] * args.alerts_per_device_hour / 3600
    write_results(args.out, "scale-postgresql.md" if args.db else "scale.md", markdown(doc), doc, args.json)
    return 0


def at_fleet_size(url: str, n: int, sample: int, repeats: int, data_dir: str | None,
                  rounds: int | None = None) -> dict[str, Any]:
    """Every case at N devices, in this process; its VmHWM at the end."""
    from fedsentry.bench.agent_memory import status
    from models.families import DEFAULT_DETECTOR

    rows, default_model = [], None
    with tempfile.TemporaryDirectory(prefix="fedsentry-benchscale-") as folder:
        for f, a in cases():
            row, model = measure(url, Path(folder) / f"{f}-{a}", f, a, n, sample, repeats, data_dir, default_model,
                                 rounds)
            rows.append(row)
            if f == DEFAULT_DETECTOR:
                default_model = model
    return {"devices": n, "rows": rows, "peak_mib": status(os.getpid()).get("VmHWM", float("nan"))}


def participants(folder: Path, job_type: str, sample: int, data_dir: str | None) -> tuple[list, dict[str, Any]]:
    """`sample` participants of the family with their data, and the job settings that data needs."""
    from fedsentry.runs.loopback import detector_participants
    from models.families import FAMILIES

    if FAMILIES[job_type].data == "ratings":
        return ratings_participants(folder, job_type, sample)
    name, features, X = records(data_dir)
    from models.partition import partition

    parts = [X[i] for i in partition(X, sample, "iid", np.random.default_rng(0))]
    return detector_participants(folder, job_type, features, parts), {"features": features, "dataset": name}


@functools.lru_cache(maxsize=2)
def records(data_dir: str | None) -> tuple[str, list[str], np.ndarray]:
    """nsl-kdd's normal records where the shared data is present, synthetic traffic otherwise."""
    from fedsentry.data import datasets

    name = "nsl-kdd" if datasets.shared_data_available("nsl-kdd", data_dir) else "synthetic"
    data = datasets.load_named(name, data_dir, 0)
    X = data.X_normal[np.random.default_rng(0).permutation(len(data.X_normal))[:20_000]]
    return name, data.feature_names, X


def ratings_participants(folder: Path, job_type: str, sample: int) -> tuple[list, dict[str, Any]]:
    """Shards of synthetic ratings (models.recsys.synthetic, its default catalogue), one per participant."""
    from edge_agent.store import AgentStore
    from models.families import family
    from models.recsys.data import from_triples, split_users
    from models.recsys.synthetic import generate_ratings

    r = generate_ratings(seed=0)
    out = []
    for i, users in enumerate(split_users(r.n_users, sample, "random", np.random.default_rng(0))):
        mine = np.isin(r.user, users)
        shard = from_triples(r.user_ids[r.user[mine]], r.item_ids[r.item[mine]], r.rating[mine], r.rating_min,
                             r.rating_max)
        out.append(family(job_type).load_participant()(f"dev-{i:02d}", AgentStore(folder / f"dev-{i:02d}"), shard))
    return out, {"items": r.item_ids.tolist(), "dataset": f"synthetic ratings ({len(r.item_ids)} items)"}


def measure(url: str, folder: Path, job_type: str, algorithm: str, n: int, sample: int, repeats: int,
            data_dir: str | None, promoted: int | None = None,
            rounds: int | None = None) -> tuple[dict[str, Any], int | None]:
    """The case's figures at N, and the id of the model its job stored (None: it stores none). `promoted`: a model
    promoted before the job starts (the fleet's default detector, which a transport map is learnt for); `rounds`: the
    job's training rounds (None: its default)."""
    from coordinator.models_service import promote
    from fedsentry.runs.loopback import Loopback
    from store.db import ModelVersion
    from wire.protocol import MAX_PAYLOAD, decode

    folder.mkdir(parents=True)
    people, settings = participants(folder, job_type, sample, data_dir)
    dataset = settings.pop("dataset")
    if rounds is not None:
        settings["rounds"] = rounds
    job = f"scale-{job_type}-{algorithm}-{uuid.uuid4().hex[:8]}"  # one length: the bytes it adds to each message
    loop = Loopback(url, job_type, algorithm, settings, people, job=job)
    runner = loop.runner
    if promoted is not None:
        promote(loop.sessions, promoted)
    loop.start()
    sampled_phases = {p.name for p in runner.phase_table() if p.sampled}
    uploads: list[int] = []
    accept: list[float] = []  # per upload
    close: dict[int, list[float]] = {sample: [], 1: []}
    over, timed = False, 0
    while not over:
        if runner.phase in sampled_phases and runner.round >= WARMUP and timed < 2 * repeats:
            asked = runner.participants if timed % 2 == 0 else runner.participants[:1]
            runner.begin(runner.phase, runner.round, asked)  # the round asked of these, as the runner asks
            replies = loop.answers(loop.outbox.pop())
            uploads += [len(p) for p in replies]
            t0 = time.perf_counter()
            for p in replies:
                runner.accept(decode(p), p)
            runner.store_uploads()
            if len(asked) > 1:  # stored as a batch, as the coordinator stores what came in together
                accept.append((time.perf_counter() - t0) / len(replies))
            t0 = time.perf_counter()
            over = bool(runner.tick())
            close[len(asked)].append(time.perf_counter() - t0)
            timed += 1
        else:
            over = loop.step()
    if runner.phase != "finished":
        raise RuntimeError(f"the {job_type} job on the sample did not finish: {runner.phase}")
    if timed < 2 * repeats:
        raise RuntimeError(f"the {job_type} job had too few training rounds to time {repeats} pairs")
    with loop.sessions() as s:
        model = s.query(ModelVersion.id).filter_by(job_id=job).scalar()
    state = server_state_bytes(runner.algorithm(), n)
    message, sampled = fleet_message(runner, n, sampled_phases)
    loop.engine.dispose()
    # the fastest of the repeats: on a shared machine the slower ones measure the other processes too
    per_upload = min(accept)
    close_all, close_one = min(close[sample]), min(close[1])
    slope = max(0.0, (close_all - close_one) / (sample - 1))
    fixed = max(0.0, close_one - slope)
    step = fixed + sampled * (per_upload + slope)
    upload = int(statistics.median(uploads))
    return {"family": job_type, "algorithm": algorithm, "dataset": dataset, "devices": n,
            "fraction": runner.spec.fraction, "sampled": sampled, "round_message_bytes": message,
            "round_message_over_max": message > MAX_PAYLOAD, "fanout_bytes_per_round": message * n,
            "server_state_bytes": state[0], "server_state_allocatable": state[1],
            "upload_bytes_per_device": upload, "upload_bytes_per_round": upload * sampled,
            "accept_s_per_upload": per_upload, "close_slope_s_per_upload": slope, "close_fixed_s": fixed,
            "server_step_s_per_round": step, "rounds_per_s": 1 / step if step > 0 else float("inf"),
            "upload_messages_per_s": 1 / (per_upload + slope), "features": len(runner.info.get("features") or ()),
            "sample_rounds": runner.spec.rounds}, model


def server_state_bytes(alg: Any, n: int) -> tuple[int, bool]:
    """The bytes of the server state the job's algorithm allocates for N devices (its arrays' sizes, pages it has not
    written yet included), and whether this machine could allocate it; when not, extrapolated linearly from 1,000
    and 2,000 devices."""
    def nbytes(k: int) -> int:
        server, _ = alg.init_server(k, np.random.default_rng(0))
        return int(sum(np.asarray(v).nbytes for v in server.values()))

    try:
        return nbytes(n), True
    except MemoryError:
        small, twice = nbytes(1_000), nbytes(2_000)
        return small + (twice - small) * (n - 1_000) // 1_000, False


def fleet_message(runner: Any, n: int, sampled_phases: set[str]) -> tuple[int, int]:
    """The bytes of the training round message the runner publishes for N participants (the sample's and generated
    ids, each with the sample's median record count), and how many devices it samples."""
    sample = list(runner.participants)
    runner.participants = (sample + [f"dev-{i:07d}" for i in range(len(sample), n)])[:n]
    runner.counts = (list(runner.counts) + [float(np.median(runner.counts))] * n)[:n]
    # the runner rebuilds its index and weights of the participants when their number changes
    phase = next(p.name for p in runner.phase_table() if p.name in sampled_phases)
    published: list[bytes] = []
    runner.publish = lambda topic, payload, retain: published.append(payload)
    runner.sample(phase, runner.round + 1)
    return len(published[-1]), len(runner.sampled)


def alert_rows_per_s(url: str, alerts: int) -> dict[str, Any]:
    """Alerts stored per second through the coordinator's ingest: the alerts `bench api` stores (fedsentry.bench.api
    .Fleet), sent as agents batch them (wire.protocol.alert_batches), decoded, made rows and stored by
    coordinator.ingest.AlertIngest, one transaction per ALERT_BATCH alerts."""
    from collections import defaultdict

    from coordinator.ingest import AlertIngest
    from coordinator.ingest_limit import IngestLimit
    from coordinator.service import ALERT_BATCH
    from fedsentry.bench.api import Fleet
    from store.db import make_engine, migrate, session_factory
    from wire.protocol import agent_topic, alert_batches, decode

    fleet = Fleet(alerts, 200)
    by_device: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for device, alert, _ in fleet.stream():
        by_device[device].append(alert)
    messages = [(agent_topic(d, "alerts"), env.encode()) for d, a in by_device.items()
                for env in alert_batches("scale", 1, d, a)]
    engine = make_engine(url)
    migrate(engine)
    refused: list[str] = []
    ingest = AlertIngest(session_factory(engine), lambda topic, payload: None, lambda mid, qos: None,
                         lambda reason, *a: refused.append(reason), IngestLimit(1e12, 1e12))
    t0 = time.perf_counter()
    for mid, (topic, payload) in enumerate(messages):
        env = decode(payload)
        ingest.buffer(env.sender, env, topic, mid, 1)
        if ingest.due(mid == len(messages) - 1, ALERT_BATCH, float("inf")):
            ingest.flush()
    seconds = time.perf_counter() - t0
    engine.dispose()
    if ingest.stored != alerts or refused:
        raise RuntimeError(f"{ingest.stored} of {alerts} alerts stored ({len(refused)} refused: {refused[:3]})")
    return {"database": engine.dialect.name, "alerts": alerts, "messages": len(messages), "seconds": seconds,
            "rows_per_s": alerts / seconds}


def markdown(doc: dict[str, Any]) -> str:
    a = doc["alerts"]
    first = doc["fleets"][0]["rows"] if doc["fleets"] else []
    data = "; ".join(sorted({f"{r['family']}: {r['dataset']}"
                             + (f", {r['features']} features" if r["features"] else "") for r in first}))
    lines = [f"Command: `{doc['command']}`", "",
             f"{doc['cores']} cores, load {doc['load_before']:.1f} before. Each family's job runs on a loopback of "
             f"{doc['sample']} real participants (the job runner and participants exchanging encoded envelopes) with "
             f"the job's default settings, fraction included; records: {data}. The round message is the one the job "
             "runner publishes for a training round of N participants (above models.core.sampling.LIST_MAX "
             "participants it carries a draw, not the sampled ids; gmm's, otmap's, dict's and recsys' also carry the "
             "model); fan-out is that message to each of the N devices. Uploads are the sample's encoded uploads, "
             "times the devices a round samples at N; the server step per round is extrapolated linearly from the "
             "sample (fixed part + uploads x (accept and store + close per upload), from rounds of all the sample "
             f"and of one device, the fastest of {doc['repeats']} each); rounds/s is its inverse, upload msgs/s the "
             "uploads one second of the coordinator takes. Server state: what the algorithm allocates for N devices at "
             "the job's start.", "",
             "| devices | family | algorithm | fraction | sampled | round message | fan-out per round | upload per "
             "device | uploads per round | server step s/round | rounds/s | upload msgs/s | server state |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for f in doc["fleets"]:
        for r in f["rows"]:
            over = " (over MAX_PAYLOAD)" if r["round_message_over_max"] else ""
            lines.append(f"| {r['devices']:,} | {r['family']} | {r['algorithm']} | {r['fraction']:g} | "
                         f"{r['sampled']:,} | {size(r['round_message_bytes'])}{over} | "
                         f"{size(r['fanout_bytes_per_round'])} | {size(r['upload_bytes_per_device'])} | "
                         f"{size(r['upload_bytes_per_round'])} | {r['server_step_s_per_round']:,.2f} | "
                         f"{r['rounds_per_s']:.3g} | {r['upload_messages_per_s']:,.0f} | "
                         f"{size(r['server_state_bytes'])}{'' if r['server_state_allocatable'] else NOT_ALLOCATED} |")
    lines += ["", f"Alerts: {a['alerts']:,} alerts in {a['messages']:,} messages stored through the coordinator's "
              f"ingest on {a['database']}: {a['rows_per_s']:,.0f} rows/s.", "",
              "| devices | alerts needed/s at " f"{doc['alerts_per_device_hour']:g}/device/h | rows/s stored | "
              "headroom | peak memory (VmHWM) |", "|---:|---:|---:|---:|---:|"]
    for f in doc["fleets"]:
        lines.append(f"| {f['devices']:,} | {f['alerts_needed_per_s']:,.0f} | {a['rows_per_s']:,.0f} | "
                     f"{a['rows_per_s'] / f['alerts_needed_per_s']:.1f}x | {f['peak_mib']:,.0f} MiB |")
    return "\n".join(lines) + "\n"


def size(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{b:,.0f} B"
