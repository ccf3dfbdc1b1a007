"""The path a user takes with a Zeek sensor, end to end: genuine conn.log files (TSV and JSON, `-` fields,
a rotation mid-run), four `fedsentry agent --zeek conn.log` processes started as the systemd unit starts them
(nothing else), a job trained from their own traffic, attack flows appended afterwards. Nothing is lost, every
flagged record is counted (incidents) within 2 s, every alert names its connection, and a model the agents
cannot use leaves them running. Hostile lines appended to the logs while the agents follow them (nested JSON,
huge integers, 1e400, a ``#separator \\x`` header, a 1 MiB line) are refused and cost no good record."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func

from api.app import create_app
from api.security import create_key
from api.settings import Settings
from models.detection.encoding import ZEEK_CONN
from models.pca.detector import PCADetector
from store.db import Alert, Device
from tests.edge_agent import zeek_hostile
from tests.integration.conftest import wait_until
from tests.integration.test_model_refusal import publish_model
from tests.integration.test_zeek_agents import FIELDS, HEADER, NUMERIC, zeek_lines
from tests.integration.test_zeek_encoding import connections

N = 4


def json_lines(batch, device: int, start: int) -> str:
    """The batch as Zeek's JSON writer logs it: unset fields left out."""
    out = []
    for line in zeek_lines(batch, device, start).splitlines():
        rec = {}
        for f, v in zip(FIELDS, line.split("\t")):
            if v == "-":
                continue
            rec[f] = float(v) if f in NUMERIC or f == "ts" else (int(v) if f.endswith("_p") else v)
        out.append(json.dumps(rec))
    return "".join(line + "\n" for line in out)


def hostile(good: str) -> str:
    """Lines that once crash-looped or held an agent (tests/edge_agent/zeek_hostile.py), each refused, built from
    a good record of the log (TSV or JSON); a TSV log ends them with a valid header again."""
    if good.startswith("{"):
        lines = [line for _, line, _ in zeek_hostile.json_lines(good)]
    else:
        lines = [line for _, line, _ in zeek_hostile.tsv_lines(good, FIELDS)]
        lines.append(zeek_hostile.separator_block(HEADER) + good + "\n" + HEADER.rstrip("\n"))
    return "".join(line + "\n" for line in [*lines, zeek_hostile.long_line(good, 1 << 20)])


def scored(path: Path) -> list[float]:
    return [float(line.split(",")[0]) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.alone  # a wall-clock bound
def test_agents_on_a_zeek_sensor_train_detect_and_lose_nothing(broker, coordinator, tmp_path):
    rng = np.random.default_rng(0)
    logs, outs, procs = [], [], []
    for d in range(N):
        tsv = d % 2 == 0
        log = tmp_path / f"sensor-{d}" / "conn.log"  # each sensor's log directory, as Zeek keeps it
        log.parent.mkdir()
        batch = connections(1500, rng)
        log.write_text(HEADER + zeek_lines(batch, d, 0) if tsv else json_lines(batch, d, 0))
        logs.append(log)
        outs.append(tmp_path / f"scores-{d}.csv")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "fedsentry.cli", "agent", "--broker", broker.url, "--id", f"zs-{d}", "--zeek",
             str(log), "--state-dir", str(tmp_path / f"state-{d}"), "--scores-out", str(outs[-1])],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"agent-{d}.log", "w")))  # noqa: SIM115
    api = TestClient(create_app(Settings(cookie_secure=False), sessions=coordinator.sessions))
    with coordinator.sessions.begin() as s:
        key = {"Authorization": f"Bearer {create_key(s, 'viewer')}"}
    try:
        wait_until(lambda: len(coordinator.online_devices("gmm")) == N, 60, "agents online")
        time.sleep(2.0)  # they read their logs (into their training reservoirs) as they start
        coordinator.create_job("zs", "gmm", "fedem", {
            "features": ZEEK_CONN.numeric, "categorical": ZEEK_CONN.categorical, "flags": ZEEK_CONN.flags,
            "rounds": 8, "fraction": 0.5, "min_agents": N, "deadline": 20.0, "algorithm_params": {"components": 6}})
        wait_until(lambda: coordinator.job_status("zs") in ("finished", "failed"), 120, "job zs")
        assert coordinator.job_status("zs") == "finished"
        wait_until(lambda: all(len(scored(o)) == 1500 for o in outs), 60, "records read before the model scored")

        for d, log in enumerate(logs):  # normal traffic, hostile lines, then a reset scan; agent 0's log rotates
            normal, scan = connections(500, rng), connections(200, rng, attack=True)
            write = (lambda b, s, d=d: zeek_lines(b, d, s)) if d % 2 == 0 else (lambda b, s, d=d: json_lines(b, d, s))
            with open(log, "a") as f:
                f.write(write(normal, 10_000))
                f.write(hostile(write(connections(1, rng), 90_000).rstrip("\n")))
            if d == 0:
                log.rename(log.with_name("conn.2024-05-02-10-00-00.log"))
                log.write_text(HEADER)
            with open(log, "a") as f:
                f.write(write(scan, 20_000))
        wait_until(lambda: all(len(scored(o)) == 1500 + 700 for o in outs), 60, "every appended record scored")
        for d in range(N):  # each hostile line refused and logged, never a crash
            text = (tmp_path / f"agent-{d}.log").read_text()
            assert "Traceback" not in text and "zeek record skipped (long;" in text
            assert all(f"zeek record skipped ({kind};" in text for kind in
                       (("number", "separator", "header") if d % 2 == 0 else ("number", "nested", "json")))
        done = time.monotonic()

        with coordinator.sessions() as s:
            thresholds = {a.device_id: a.threshold for a in s.query(Alert).filter(Alert.job_id == "zs")}
        flagged = {f"zs-{d}": sum(v > thresholds[f"zs-{d}"] for v in scored(o)) for d, o in enumerate(outs)}

        def counted() -> dict[str, int]:  # as the API serves them: flagged records per device
            return {f"zs-{d}": api.get("/api/v1/anomalies/counts", params={"job": "zs", "device": f"zs-{d}",
                                                                           "since": "2000-01-01T00:00:00Z"},
                                       headers=key).json()["records"] for d in range(N)}

        wait_until(lambda: counted() == flagged, 10, "every flagged record counted")
        assert time.monotonic() - done <= 2.0
        incidents = api.get("/api/v1/incidents", params={"job": "zs", "since": "2000-01-01T00:00:00Z", "limit": 500},
                            headers=key).json()["items"]
        with coordinator.sessions() as s:
            in_updates = s.query(func.sum(Alert.count)).filter(Alert.job_id == "zs", Alert.incident_id.isnot(None))
            assert sum(i["count"] for i in incidents) == in_updates.scalar() > 0
        assert [len(scored(o)) for o in outs] == [2200] * N  # nothing lost, nothing scored twice
        with coordinator.sessions() as s:
            alerts = s.query(Alert).filter(Alert.job_id == "zs").all()
        assert all(a.flow and a.flow.get("uid", "").startswith(f"C{a.device_id[-1]}x") for a in alerts)
        assert any(a.incident for a in alerts)  # past the default budget of 20 a minute: incidents
        scan_counted = sum(a.count for a in alerts if int(a.flow["uid"].split("x")[1]) >= 20_000)
        assert scan_counted >= 0.9 * N * 200

        # a promoted model these agents cannot supply: refused, they keep running and scoring
        lacks = PCADetector(rank=1).fit(np.abs(rng.normal(10, 1, (100, 3))), ["duration", "src_bytes", "zz"])
        publish_model(broker.url, lacks, 99)
        for d, log in enumerate(logs):
            with open(log, "a") as f:
                f.write(zeek_lines(connections(10, rng), d, 30_000) if d % 2 == 0 else
                        json_lines(connections(10, rng), d, 30_000))
        wait_until(lambda: all(len(scored(o)) == 2210 for o in outs), 30, "scoring after the bad promotion")
        assert all(p.poll() is None for p in procs)

        def refused() -> int:
            with coordinator.sessions() as s:
                return sum(1 for dev in s.query(Device).filter(Device.id.like("zs-%"))
                           if (dev.model_status or {}).get("refused", {}).get("version") == 99)

        wait_until(lambda: refused() == N, 10, "every agent reported the refusal")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=20)
