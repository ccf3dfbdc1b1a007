"""Agents pointed at a Zeek conn.log and nothing else (as deploy/systemd/fedsentry-agent.service starts them):
they learn from the traffic they follow, a job trains from it (text fields one-hot, unset values missing),
and attacks appended afterwards are scored, every record, with alerts that name their connection."""

from __future__ import annotations

import numpy as np

from edge_agent.sources import ZeekFollower
from models.detection.encoding import ZEEK_CONN
from store.db import Alert
from tests.integration.conftest import wait_until
from tests.integration.test_zeek_encoding import connections

FIELDS = ["ts", "uid", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p", "proto", "service", "duration",
          "orig_bytes", "resp_bytes", "conn_state", "missed_bytes", "history", "orig_pkts", "orig_ip_bytes",
          "resp_pkts", "resp_ip_bytes"]
NUMERIC = {"duration": 0, "orig_bytes": 1, "resp_bytes": 2, "missed_bytes": 3, "orig_pkts": 4, "orig_ip_bytes": 5,
           "resp_pkts": 6, "resp_ip_bytes": 7}
HEADER = "#separator \\x09\n#unset_field\t-\n#empty_field\t(empty)\n#path\tconn\n#fields\t" + "\t".join(FIELDS) + "\n"


def zeek_lines(batch, device: int, start: int) -> str:
    """The batch as Zeek writes conn.log: TSV, `-` for unset values."""
    out = []
    for i in range(len(batch.X)):
        rec = {"ts": f"{1_700_000_000 + start + i}.000000", "uid": f"C{device}x{start + i:06d}",
               "id.orig_h": f"192.168.{device}.{i % 200 + 2}", "id.orig_p": str(40000 + i % 20000),
               "id.resp_h": "10.0.0.1", "id.resp_p": "53"}
        for f in ("proto", "service", "conn_state", "history"):
            v = batch.text[f][i]
            rec[f] = "-" if v is None else v
        for f, j in NUMERIC.items():
            v = batch.X[i, j]
            rec[f] = "-" if np.isnan(v) else (f"{v:.6f}" if f == "duration" else str(int(v)))
        out.append("\t".join(rec[f] for f in FIELDS))
    return "".join(line + "\n" for line in out)


def test_agents_on_zeek_logs_train_from_their_own_traffic_and_name_the_flows_they_flag(broker, coordinator, fleet,
                                                                                       tmp_path):
    n = 4
    rng = np.random.default_rng(0)
    logs, agents = [], []
    for d in range(n):
        log = tmp_path / f"conn-{d}.log"
        log.write_text(HEADER + zeek_lines(connections(1500, rng), d, 0))
        logs.append(log)
        agents.append(fleet.add(f"zeek-{d}", None, [], source=ZeekFollower(log), learn=True, alert_burst=100_000))
    wait_until(lambda: all(a.buffer.seen == 1500 for a in agents), 30, "agents learned their traffic")
    wait_until(lambda: len(coordinator.online_devices("gmm")) == n, what="agents online")
    coordinator.create_job("zk", "gmm", "fedem", {
        "features": ZEEK_CONN.numeric, "categorical": ZEEK_CONN.categorical, "flags": ZEEK_CONN.flags, "rounds": 8,
        "fraction": 0.5, "min_agents": n, "deadline": 10.0, "algorithm_params": {"components": 6}})
    wait_until(lambda: coordinator.job_status("zk") in ("finished", "failed"), 60, "job zk")
    assert coordinator.job_status("zk") == "finished"
    wait_until(lambda: all(a.scorer.model_job == "zk" for a in agents), what="model at every agent")
    # a reset scan appended to each log, after more normal traffic
    for d, log in enumerate(logs):
        with open(log, "a") as f:
            f.write(zeek_lines(connections(500, rng), d, 10_000) + zeek_lines(connections(200, rng, attack=True),
                                                                                d, 20_000))
    # every record read is scored once: the 1,500 read before the model existed were held, then scored
    wait_until(lambda: all(a.counters["records"] == 1500 + 700 for a in agents), 30, "every record scored")
    with coordinator.sessions() as s:
        wait_until(lambda: s.query(Alert).filter_by(job_id="zk").count() == sum(a.counters["alerts"] for a in agents),
                   20, "every alert stored")
        alerts = s.query(Alert).filter_by(job_id="zk").all()
    assert all(a.flow and a.flow["uid"].startswith("C") and a.flow["id.resp_p"] == "53" for a in alerts)
    scan = [a for a in alerts if int(a.flow["uid"].split("x")[1]) >= 20_000]
    normal = len(alerts) - len(scan)
    assert len(scan) >= 0.9 * 4 * 200 and normal <= 0.05 * 4 * 2000, (len(scan), normal)
