"""`fedsentry bench ingest`: how fast `fedsentry coordinator --role ingest` workers store alerts from the RabbitMQ
quorum queue, with 1, 2, ... workers (issue 27, point 2).

For each worker count, on a scratch PostgreSQL database of its own: the queue is emptied and filled with the alerts
(AMQP, persistent, routed as RabbitMQ's MQTT plugin routes what devices publish), then the workers start as real
processes. The alerts table is locked for writes until every worker reads the queue, so their start-up is not
timed: the rate runs from that moment until the last alert is stored. The ratio is each count's rate over one
worker's. PostgreSQL only: on SQLite one writer at a time makes a second worker pointless."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fedsentry.bench.waiting import ProcessExitedError, wait_while_running
from fedsentry.errors import UsageError
from fedsentry.output import write_results


def run(args: argparse.Namespace) -> int:
    from coordinator.queue_ingest import check_queue_url
    from fedsentry.errors import database_error
    from store.db import is_postgresql

    logging.getLogger("pika").setLevel(logging.WARNING)
    from sqlalchemy.exc import ArgumentError, OperationalError

    try:
        check_queue_url(args.queue)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not is_postgresql(args.postgres):
        raise UsageError("--postgres: a PostgreSQL server's URL, e.g. postgresql://postgres@127.0.0.1:5432/postgres")
    try:
        runs = [one_count(args, n) for n in args.workers]
    except (ArgumentError, OperationalError) as e:
        raise database_error("--postgres", e) from None
    base = runs[0]["alerts_per_s"] if runs and args.workers[0] == 1 else None
    for r in runs:
        r["ratio"] = round(r["alerts_per_s"] / base, 2) if base else None
    result = {"command": shlex.join(["fedsentry", *sys.argv[1:]]), "alerts": args.alerts,
              "devices": args.devices, "per_message": args.per_message, "cores": os.cpu_count(),
              "load_before": os.getloadavg()[0], "runs": runs}
    write_results(args.out, "ingest-workers.md", markdown(result), result, args.json)
    return 0


def one_count(args: argparse.Namespace, workers: int) -> dict[str, Any]:
    import pika
    import pika.exceptions
    from sqlalchemy import func, select, text
    from sqlalchemy.orm import Session

    from coordinator.broker import Mosquitto
    from coordinator.queue_ingest import QUEUE, ROUTING_KEY, mqtt_topic
    from fedsentry.bench.api import database
    from store.db import Alert, make_engine, migrate

    with database(args.postgres, True) as url, tempfile.TemporaryDirectory(prefix="fedsentry-benchingest-") as logs:
        engine = make_engine(url)
        migrate(engine)
        try:
            conn = pika.BlockingConnection(pika.URLParameters(args.queue))
        except pika.exceptions.AMQPError as e:
            where = urlsplit(args.queue)
            why = f": {e}" if str(e) else ""
            raise UsageError(f"--queue: no RabbitMQ answers at {where.hostname}:{where.port or 5672} "
                             f"({type(e).__name__}{why})") from None
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_bind(QUEUE, "amq.topic", ROUTING_KEY)
        ch.queue_purge(QUEUE)
        ch.confirm_delivery()
        published = fill(ch, args, mqtt_topic)
        broker = Mosquitto().start()  # the workers' MQTT connection (device status); alerts come from the queue
        procs = [subprocess.Popen(
            [sys.executable, "-m", "fedsentry.cli", "coordinator", "--role", "ingest", "--client-id", f"ingest-{i}",
             "--ingest-workers", str(workers), "--db", url, "--broker", broker.url],
            env={**os.environ, "FEDSENTRY_QUEUE_URLS": args.queue}, stdout=subprocess.DEVNULL,
            stderr=(Path(logs) / f"ingest-{i}.log").open("w")) for i in range(workers)]

        def stored() -> int:
            with Session(engine) as s:
                return int(s.scalar(select(func.count()).select_from(Alert)) or 0)

        try:
            with engine.connect() as gate:  # the workers take alerts but store none until every one reads the queue
                gate.execute(text("LOCK TABLE alerts IN EXCLUSIVE MODE"))  # reads go on, writes wait
                until(lambda: ch.queue_declare(QUEUE, passive=True).method.consumer_count == workers, 120,
                      "every worker reading the queue", procs, logs)
                gate.rollback()
            t0 = time.perf_counter()
            # counted 4 times a second: a count over the growing table is itself work for the database (20 times a
            # second took a third of a core from the run it timed)
            until(lambda: stored() >= published, 600, f"{published} alerts stored", procs, logs)
            elapsed = time.perf_counter() - t0
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=60)
            engine.dispose()
            broker.close()
            conn.close()
    rate = published / elapsed
    print(f"{workers} worker(s): {published} alerts in {elapsed:.2f} s = {rate:,.0f} alerts/s", file=sys.stderr,
          flush=True)
    return {"workers": workers, "timed_alerts": published, "seconds": round(elapsed, 3),
            "alerts_per_s": round(rate, 1)}


def fill(ch: Any, args: argparse.Namespace, mqtt_topic: Any) -> int:
    """Publish the alerts: `devices` devices, `per_message` alerts per message, the devices interleaved."""
    import pika

    from wire.protocol import agent_topic, alert_batches

    persistent = pika.BasicProperties(delivery_mode=2)
    per_device = -(-args.alerts // args.devices)
    now, n = time.time(), 0
    for k in range(0, per_device, args.per_message):
        for d in range(args.devices):
            device = f"bench-{d:05d}"
            alerts = [{"id": f"{device}-{j}", "ts": now, "score": 5.0, "threshold": 1.0, "count": 1}
                      for j in range(k, min(k + args.per_message, per_device))]
            for env in alert_batches("bench", 1, device, alerts):
                ch.basic_publish("amq.topic", mqtt_topic(agent_topic(device, "alerts")), env.encode(), persistent)
            n += len(alerts)
    return n


def until(done: Any, timeout: float, what: str, procs: list[subprocess.Popen], logs: str) -> None:
    """wait_while_running 4 times a second, with the log of the worker that exited (or the first) on failure."""
    try:
        wait_while_running(done, timeout, what, procs, every=0.25)
    except (ProcessExitedError, TimeoutError) as e:
        tail = (Path(logs) / f"ingest-{getattr(e, 'index', 0)}.log").read_text()[-1500:]
        raise RuntimeError(f"{e}; worker log ends:\n{tail}") from None


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Command: `{result['command']}`", "",
             f"{result['alerts']:,} alerts from {result['devices']} devices, {result['per_message']} per message, "
             f"pre-filled in the quorum queue; {result['cores']} cores, load {result['load_before']:.1f} before.", "",
             "| ingest workers | alerts timed | seconds | alerts/s | ratio to one |", "|---:|---:|---:|---:|---:|"]
    for r in result["runs"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['workers']} | {r['timed_alerts']:,} | {r['seconds']:.2f} | {r['alerts_per_s']:,.0f} | "
                     f"{ratio} |")
    return "\n".join(lines) + "\n"
