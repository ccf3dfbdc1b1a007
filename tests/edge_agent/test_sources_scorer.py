import json

import numpy as np
import pytest

from edge_agent.scorer import RateLimiter
from edge_agent.sources import (
    Batch,
    SchemaError,
    ZeekFollower,
    batch_counts,
    csv_source,
    encode_batch,
    json_lines,
    select,
)
from models.detection.encoding import MISSING, ZEEK_CONN, FeatureEncoder, agree_vocabulary

NAN = float("nan")

ZEEK_HEADER = ("#separator \\x09\n#fields\tts\tuid\tid.orig_h\tproto\tduration\torig_bytes\tresp_bytes\t"
               "conn_state\tmissed_bytes\torig_pkts\torig_ip_bytes\tresp_pkts\tresp_ip_bytes\n")


def zeek_line(i, state="SF"):
    return f"{i}.0\tC{i}\t10.0.0.1\ttcp\t0.5\t{100 + i}\t200\t{state}\t0\t3\t256\t2\t300\n"


def test_zeek_follower_maps_fields_follows_growth_and_rotation(tmp_path):
    log = tmp_path / "conn.log"
    log.write_text(ZEEK_HEADER + zeek_line(1) + zeek_line(2, "REJ"))
    f = ZeekFollower(log)
    b = f.poll()
    X = select(b, ["src_bytes", "dst_bytes", "proto_tcp", "conn_rejected", "src_ip_bytes"])
    assert X.tolist() == [[101, 200, 1, 0, 256], [102, 200, 1, 1, 256]]
    assert f.poll() is None
    with log.open("a") as h:
        h.write(zeek_line(3))
        h.write("4.0\tpartial")  # a line Zeek is still writing is left for later
    assert select(f.poll(), ["src_bytes"]).tolist() == [[103]]
    resumed = ZeekFollower(log, f.position)  # the agent persisted its position and restarted
    assert resumed.poll() is None
    log.rename(tmp_path / "conn.1.log")  # rotation: a new file with a new inode
    log.write_text(ZEEK_HEADER + zeek_line(9))
    assert select(resumed.poll(), ["src_bytes"]).tolist() == [[109]]


def test_zeek_json_lines(tmp_path):
    log = tmp_path / "conn.log"
    log.write_text('{"proto":"udp","duration":1.5,"orig_bytes":10,"resp_bytes":"-","conn_state":"S0"}\n')
    X = select(ZeekFollower(log).poll(), ["proto_udp", "duration", "src_bytes", "dst_bytes", "conn_rejected"])
    np.testing.assert_array_equal(X, [[1, 1.5, 10, NAN, 1]])  # unset is missing, not 0


FIELDS = ("ts uid id.orig_h id.orig_p id.resp_h id.resp_p proto service duration orig_bytes resp_bytes conn_state "
          "local_orig local_resp missed_bytes history orig_pkts orig_ip_bytes resp_pkts resp_ip_bytes tunnel_parents")
TYPES = ("time string addr port addr port enum string interval count count string bool bool count string count "
         "count count count set[string]")


def tsv(*cells: str) -> str:
    return "\t".join(cells) + "\n"


# A conn.log as Zeek 6 writes it (TSV), with unset fields, an empty history and a service nobody else sees.
CONN_HEADER = ("#separator \\x09\n" + tsv("#set_separator", ",") + tsv("#empty_field", "(empty)")
               + tsv("#unset_field", "-") + tsv("#path", "conn") + tsv("#open", "2024-05-02-10-00-00")
               + tsv("#fields", *FIELDS.split()) + tsv("#types", *TYPES.split()))
CONN_RECORDS = [
    "1714644000.120000\tCHhAvVGS1DHFjwGM9\t192.168.1.20\t51234\t93.184.216.34\t443\ttcp\tssl\t2.503\t517\t4312\t"
    "SF\tT\tF\t0\tShADadfF\t12\t1149\t10\t4844\t(empty)",
    "1714644001.000000\tC4J4Th3PJpwUYZZ6gc\t192.168.1.20\t51300\t10.0.0.9\t23\ttcp\t-\t-\t-\t-\t"
    "S0\tT\tT\t0\tS\t1\t60\t0\t0\t(empty)",
    "1714644002.500000\tCtPZjS20MLrsMUOJi2\t192.168.1.31\t5353\t224.0.0.251\t5353\tudp\tmdns-weird\t0.001\t"
    "40\t0\tS0\tT\tF\t0\t(empty)\t1\t68\t0\t0\t(empty)",
]
CONN_JSON = [
    '{"ts":1714644003.2,"uid":"CxT1","id.orig_h":"192.168.1.20","id.orig_p":40000,"id.resp_h":"8.8.8.8",'
    '"id.resp_p":53,"proto":"udp","service":"dns","duration":0.02,"orig_bytes":35,"resp_bytes":51,'
    '"conn_state":"SF","missed_bytes":0,"history":"Dd","orig_pkts":1,"orig_ip_bytes":63,"resp_pkts":1,'
    '"resp_ip_bytes":79}',
    # a JSON log leaves unset fields out: no service, duration, bytes nor history
    '{"ts":1714644004.0,"uid":"CxT2","id.orig_h":"192.168.1.20","id.orig_p":40001,"id.resp_h":"10.0.0.9",'
    '"id.resp_p":22,"proto":"tcp","conn_state":"OTH","missed_bytes":0,"orig_pkts":0,"orig_ip_bytes":0,'
    '"resp_pkts":0,"resp_ip_bytes":0}',
]


def test_zeek_tsv_keeps_unset_numbers_missing_and_the_text_fields(tmp_path):
    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + "\n".join(CONN_RECORDS) + "\n")
    b = ZeekFollower(log).poll()
    X = select(b, ["duration", "src_bytes", "dst_bytes", "src_pkts", "proto_tcp", "conn_rejected"])
    np.testing.assert_array_equal(X, [[2.503, 517, 4312, 12, 1, 0], [NAN, NAN, NAN, 1, 1, 1],
                                      [0.001, 40, 0, 1, 0, 1]])
    np.testing.assert_array_equal(select(b, ["duration"], fill=0.0), [[2.503], [0], [0.001]])  # caller's choice
    assert b.text["service"].tolist() == ["ssl", None, "mdns-weird"]
    assert b.text["history"].tolist() == ["ShADadfF", "S", ""]  # (empty): no flags
    assert b.text["uid"].tolist() == ["CHhAvVGS1DHFjwGM9", "C4J4Th3PJpwUYZZ6gc", "CtPZjS20MLrsMUOJi2"]
    assert b.text["id.resp_p"].tolist() == ["443", "23", "5353"] and b.text["ts"][0] == "1714644000.120000"
    assert b.text["id.orig_h"][2] == "192.168.1.31" and b.text["id.resp_h"][1] == "10.0.0.9"


def test_zeek_tsv_respects_its_own_unset_and_empty_markers_across_a_restart(tmp_path):
    log = tmp_path / "conn.log"
    header = CONN_HEADER.replace("#empty_field\t(empty)", "#empty_field\tEMPTY").replace("#unset_field\t-",
                                                                                           "#unset_field\tNONE")
    line = CONN_RECORDS[1].replace("\t-", "\tNONE").replace("\tS\t", "\tEMPTY\t")
    log.write_text(header + line + "\n")
    f = ZeekFollower(log)
    b = f.poll()
    np.testing.assert_array_equal(select(b, ["duration", "src_bytes", "src_pkts"]), [[NAN, NAN, 1]])
    assert b.text["service"].tolist() == [None] and b.text["history"].tolist() == [""]
    resumed = ZeekFollower(log, json.loads(json.dumps(f.position)))  # the agent persisted its position
    with log.open("a") as h:
        h.write(line + "\n")
    np.testing.assert_array_equal(select(resumed.poll(), ["duration", "src_pkts"]), [[NAN, 1]])
    with log.open("a") as h:
        h.write(line.replace("NONE", "-") + "\n")  # "-" is not this log's unset marker: not a number
    assert resumed.poll() is None


def test_zeek_json_keeps_absent_fields_missing_and_the_text_fields(tmp_path):
    log = tmp_path / "conn.log"
    log.write_text("\n".join(CONN_JSON) + "\n[1, 2]\n")  # a line that is not an object is skipped
    b = ZeekFollower(log).poll()
    np.testing.assert_array_equal(select(b, ["duration", "src_bytes", "dst_pkts", "proto_udp"]),
                                  [[0.02, 35, 1, 1], [NAN, NAN, 0, 0]])
    assert b.text["service"].tolist() == ["dns", None] and b.text["history"].tolist() == ["Dd", None]
    assert b.text["id.resp_p"].tolist() == ["53", "22"] and b.text["uid"].tolist() == ["CxT1", "CxT2"]


def test_zeek_batches_encode_with_an_agreed_vocabulary(tmp_path):
    tsv, js = tmp_path / "a.log", tmp_path / "b.log"
    tsv.write_text(CONN_HEADER + "\n".join(CONN_RECORDS) + "\n")
    js.write_text("\n".join(CONN_JSON) + "\n")
    a, b = ZeekFollower(tsv).poll(), ZeekFollower(js).poll()
    enc = agree_vocabulary([batch_counts(a, ZEEK_CONN), batch_counts(b, ZEEK_CONN)], min_count=1)
    assert enc.categorical["proto"] == ["tcp", "udp"]
    assert enc.categorical["service"] == [MISSING]  # ssl, mdns-weird and dns: each on one device only
    assert enc.missing_indicators == ["duration", "src_bytes", "dst_bytes"]
    assert enc.flags["history"] == ["D", "d"]  # both devices; S, h, A, a, f, F on one device only
    enc = FeatureEncoder.from_dict(json.loads(json.dumps(enc.to_dict())))  # as the job message carries it
    E = encode_batch(a, enc)
    names = enc.feature_names
    row = dict(zip(names, E[1]))  # the S0 record with unset duration and bytes
    assert np.isnan(row["duration"]) and row["duration_missing"] == 1 and row["src_bytes_missing"] == 1
    assert row["service=(unset)"] == 1 and row["history:D"] == row["history:d"] == 0
    assert dict(zip(names, E[2]))["service=other"] == 1  # an unknown service
    assert dict(zip(names, E[0]))["history:D"] == 1 and dict(zip(names, E[0]))["duration_missing"] == 0
    with pytest.raises(SchemaError, match="lacks the model's text fields: history"):
        encode_batch(Batch(a.columns, a.X, text={k: v for k, v in a.text.items() if k != "history"}), enc)
    with pytest.raises(SchemaError, match="lacks the model's text fields: proto, service"):
        encode_batch(Batch(a.columns, a.X), enc)


def test_csv_and_json_sources(tmp_path):
    f = tmp_path / "r.csv"
    f.write_text("a,b,label\n1,2,0\n3,4,1\n")
    b = next(csv_source(f, label_column="label"))
    assert b.columns == ["a", "b"] and b.X.tolist() == [[1, 2], [3, 4]] and b.labels.tolist() == [0, 1]
    batches = list(json_lines(iter(['{"a": 1, "b": 2}', "nonsense", '{"a": 3}'])))
    assert select(batches[0], ["a"]).tolist() == [[1], [3]]


def test_missing_features_are_named():
    with pytest.raises(SchemaError, match="lacks the model's features: c, d"):
        select(Batch(["a", "b"], np.zeros((1, 2))), ["a", "c", "d"])


def test_rate_limiting_groups_flagged_records_into_incidents_and_counts_every_one():
    rl = RateLimiter(burst=3, window=10.0, started=0.0, flushed=0.0)

    def alert(i, feature):
        return {"id": str(i), "ts": 100.0 + i, "score": float(i), "flow": {"uid": f"C{i}"},
                "explanation": [{"feature": feature}, {"feature": "dst_bytes"}]}

    sent = []
    for i in range(10):
        sent += rl.admit(alert(i, "src_bytes" if i % 2 else "duration"), now=0.5)
    assert [a["id"] for a in sent] == ["0", "1", "2"]
    assert rl.suppressed == 7 and rl.flush(now=0.9) == []  # not due yet: updates leave once a second
    updates = {u["incident"]["key"]: u for u in rl.flush(now=1.0)}  # due on the timer, no new traffic needed
    assert set(updates) == {"dst_bytes+duration", "dst_bytes+src_bytes"}
    odd = updates["dst_bytes+src_bytes"]
    assert odd["count"] == 4 and odd["summary"] and odd["score"] == 9.0 and odd["ts"] == 109.0
    assert odd["incident"]["first"] == 103.0
    assert odd["incident"]["samples"] == [{"uid": "C3"}, {"uid": "C5"}, {"uid": "C7"}, {"uid": "C9"}]
    assert sum(u["count"] for u in updates.values()) == 7 and rl.suppressed == 0
    # the incident keeps growing: the next update counts only the new records; a new window, a new budget
    more = rl.admit(alert(11, "src_bytes"), now=2.5) + rl.flush(now=2.5)
    assert [m["count"] for m in more] == [1] and more[0]["incident"]["window"] == 0.0
    assert [a["id"] for a in rl.admit(alert(12, "src_bytes"), now=11.0)] == ["12"]
    # its state survives a restart
    rl.admit(alert(13, "src_bytes"), now=11.0), rl.admit(alert(14, "src_bytes"), now=11.0)
    pending = rl.admit(alert(15, "src_bytes"), now=11.0)
    restored = RateLimiter(burst=3, window=10.0)
    restored.restore(rl.state())
    assert pending == [] and restored.suppressed == 1 and restored.flush(now=12.5)[0]["count"] == 1


def test_agent_scores_unset_values_at_the_models_mean_not_at_zero(tmp_path):
    from edge_agent.agent import Agent, AgentConfig
    from models.detection.preprocessing import Preprocessor
    from models.pca.detector import PCADetector

    names = ["duration", "src_bytes", "dst_bytes", "proto_tcp"]
    pre = Preprocessor(names, np.array([True, True, True, False]), np.array([0.5, 5.0, 6.0, 0.7]),
                       np.array([0.3, 1.5, 2.0, 0.4]))
    det = PCADetector.from_model(np.eye(4)[:, :1], pre, threshold=1e9)
    scores = tmp_path / "scores.csv"
    agent = Agent(AgentConfig("dev-1", "mqtt://127.0.0.1:1", str(tmp_path / "state"), scores_out=str(scores)))
    agent.scorer.detector = det
    agent.ingest(Batch(names, np.array([[NAN, NAN, 400.0, 1.0]])))  # Zeek's S0 record: duration, bytes unset
    agent._scores.close()
    got = float(scores.read_text().split(",")[0])
    mean_raw = pre.inverse_transform(np.zeros((1, 4)))[0]  # the raw values that standardise to 0
    assert got == pytest.approx(det.score_samples(np.array([[mean_raw[0], mean_raw[1], 400.0, 1.0]]))[0])
    assert got != pytest.approx(det.score_samples(np.array([[0.0, 0.0, 400.0, 1.0]]))[0])
    assert agent.counters["missing"] == 2 and agent.counters["records"] == 1


def test_an_agent_with_calibrate_scores_at_its_own_threshold(tmp_path):
    """--calibrate: the promoted model's threshold becomes the device's own quantile of its held-out training
    records' scores (within a factor 2 of the federation's); without it, the federation's."""
    from edge_agent.agent import Agent, AgentConfig
    from models.mixture.detector import MixtureDetector
    from wire.model import model_envelope

    rng = np.random.default_rng(0)
    names = ["a", "b", "c"]
    fleet = np.exp(rng.normal(0, 1, (4000, 3)))
    det = MixtureDetector(components=2, quantile=0.98).fit(fleet, names)
    env = model_envelope("j", 1, det)
    mine = np.exp(rng.normal(0.5, 1.3, (3000, 3)))  # this device's traffic is wider than the fleet's
    thresholds = {}
    for calibrate in (False, True):
        agent = Agent(AgentConfig(f"cal-{calibrate}", "mqtt://127.0.0.1:1", str(tmp_path / str(calibrate)),
                                  calibrate=calibrate), training=iter([Batch(names, mine)]))
        agent.load_model(env)
        thresholds[calibrate] = agent.scorer.detector.threshold_
    assert thresholds[False] == det.threshold_
    held = mine[4::5]
    own = np.quantile(np.asarray(det.score_samples(held)), 0.98)
    assert thresholds[True] == pytest.approx(np.clip(own, det.threshold_ / 2, det.threshold_ * 2), rel=0.01)
    assert thresholds[True] > det.threshold_ * 1.05  # wider traffic: a higher threshold of its own


def test_alerts_carry_the_flow_of_their_record(tmp_path):
    """An alert names its connection: Zeek's uid, time, addresses, ports, proto and service; a CSV's line."""
    from edge_agent.scorer import Scorer
    from models.pca.detector import PCADetector
    from wire.model import model_envelope

    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + "".join(r + "\n" for r in CONN_RECORDS))
    batch = ZeekFollower(log).poll()
    numeric = ["duration", "src_bytes", "dst_bytes", "src_pkts", "dst_pkts"]
    rng = np.random.default_rng(0)
    det = PCADetector(rank=1).fit(np.abs(rng.normal(100, 10, (200, len(numeric)))), numeric)
    det.threshold_ = 1e-9  # every record is flagged
    scorer = Scorer("dev-1", burst=100)
    scorer.load(model_envelope("j", 1, det))
    _, alerts = scorer.score(scorer.matrix(batch), batch)
    assert [a["flow"]["uid"] for a in alerts] == ["CHhAvVGS1DHFjwGM9", "C4J4Th3PJpwUYZZ6gc", "CtPZjS20MLrsMUOJi2"]
    assert alerts[0]["flow"] == {"uid": "CHhAvVGS1DHFjwGM9", "ts": "1714644000.120000", "id.orig_h": "192.168.1.20",
                                 "id.orig_p": "51234", "id.resp_h": "93.184.216.34", "id.resp_p": "443",
                                 "proto": "tcp", "service": "ssl"}
    assert "service" not in alerts[1]["flow"]  # unset in the log
    csv_file = tmp_path / "replay.csv"
    csv_file.write_text(",".join(numeric) + "\n" + "\n".join(",".join(["1"] * len(numeric)) for _ in range(3)) + "\n")
    (rows,) = list(csv_source(csv_file))
    _, alerts = scorer.score(scorer.matrix(rows), rows)
    assert [a["flow"] for a in alerts] == [{"row": 2}, {"row": 3}, {"row": 4}]
    # whatever the traffic writes in a flow field, the agent sends it as the coordinator keeps it (wire.flows):
    # escaped and bounded (before: sent raw, and the coordinator refused the whole alert)
    hostile = Batch(numeric, np.ones((1, len(numeric))),
                    text={"uid": np.array(["C1\n\x1b[31m"], dtype=object),
                          "service": np.array(["x" * 1000], dtype=object)})
    _, (alert,) = scorer.score(scorer.matrix(hostile), hostile)
    assert alert["flow"] == {"uid": "C1\\u000a\\u001b[31m", "service": "x" * 255 + "…"}
    from store.alerts import flow_problem

    assert flow_problem(alert["flow"]) is None


def test_train_accepts_zeek_logs_and_csv(tmp_path):
    from edge_agent.agent import training_source

    log = tmp_path / "conn.log"
    log.write_text(CONN_HEADER + "".join(r + "\n" for r in CONN_RECORDS))
    batches = list(training_source(str(log)))
    assert sum(len(b.X) for b in batches) == len(CONN_RECORDS) and batches[0].text["uid"][0] == "CHhAvVGS1DHFjwGM9"
    js = tmp_path / "conn.json"
    js.write_text("\n".join(CONN_JSON) + "\n")
    assert sum(len(b.X) for b in training_source(str(js))) == len(CONN_JSON)
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("a,b\n1,2\n3,4\n")
    assert sum(len(b.X) for b in training_source(str(csv_file))) == 2


def test_rotation_loses_nothing_even_within_one_poll_or_across_a_restart(tmp_path):
    """Zeek renames conn.log and starts a new one: the rest of the renamed file is read first, then the new
    file from its start; an agent that stopped before the rotation finds the renamed file by its inode."""
    log = tmp_path / "conn.log"
    log.write_text(ZEEK_HEADER + "".join(zeek_line(i) for i in range(100)))
    f = ZeekFollower(log)
    assert len(f.poll().X) == 100
    saved = dict(f.position)  # an agent persisting its position, then stopping
    with open(log, "a") as out:
        out.write("".join(zeek_line(i) for i in range(100, 150)))
    log.rename(tmp_path / "conn.2024-05-02-10-00-00.log")  # rotated before the next poll
    log.write_text(ZEEK_HEADER + "".join(zeek_line(i) for i in range(150, 180)))
    uids = []
    while (b := f.poll(max_records=40)) is not None:
        uids += list(b.text["uid"])
    assert uids == [f"C{i}" for i in range(100, 180)]
    restarted = ZeekFollower(log, saved)
    uids = []
    while (b := restarted.poll()) is not None:
        uids += list(b.text["uid"])
    assert uids == [f"C{i}" for i in range(100, 180)]
    # truncated in place (copytruncate): read again from the start
    log.write_text(ZEEK_HEADER + zeek_line(999))
    assert list(f.poll().text["uid"]) == ["C999"]


def test_a_training_file_without_records_is_refused_by_the_agent(tmp_path, capsys):
    from fedsentry.cli import main

    for name, text in (("empty.csv", ""), ("text.csv", "a,b\nx,y\n")):
        f = tmp_path / name
        f.write_text(text)
        assert main(["agent", "--id", "t1", "--broker", "mqtt://127.0.0.1:1", "--train", str(f),
                     "--state-dir", str(tmp_path / f"state-{name}")]) == 2
        assert "the training file holds no records" in capsys.readouterr().err


def test_every_source_reads_through_one_protocol(tmp_path):
    """CSV and JSON lines are replays (batches, then False, nothing to resume); a Zeek log is followed (None while
    nothing new, a position to resume at)."""
    from edge_agent.sources import Replay, ZeekFollower, as_source, json_lines

    replay = as_source(json_lines(iter(['{"a": 1}\n', '{"a": 2}\n'])))
    assert isinstance(replay, Replay) and replay.position is None
    first = replay.poll()
    assert first is not False and first is not None and len(first.X) == 2
    assert replay.poll() is False
    log = tmp_path / "conn.log"
    log.write_text("#separator \\x09\n#fields\tts\tuid\tduration\n1.0\tC1\t0.5\n")
    follower = as_source(ZeekFollower(log))
    assert follower is not None and len(follower.poll().X) == 1 and follower.poll() is None
    at = follower.position
    with open(log, "a") as f:
        f.write("2.0\tC2\t0.7\n")
    again = ZeekFollower(log)
    again.seek(at)
    assert len(again.poll().X) == 1  # only the record written after the saved position


def test_every_flagged_record_past_the_budget_leaves_whole_in_its_incident_updates():
    """The budget limits notifications, never storage: each update carries every record it counts (time, score,
    flow, explanation); a flood leaves as many updates as it needs, each within RECORDS_PER_UPDATE, at once."""
    from wire.protocol import RECORDS_PER_UPDATE

    rl = RateLimiter(burst=2, window=60.0, started=0.0, flushed=0.0)
    sent = []
    n = 2 + 3 * RECORDS_PER_UPDATE + 5
    for i in range(n):
        sent += rl.admit({"id": str(i), "ts": 100.0 + i, "score": 5.0 + i % 7, "flow": {"uid": f"C{i}"},
                          "explanation": [{"feature": "dst_bytes", "value": float(i)}, {"feature": "duration"},
                                          {"feature": "a"}, {"feature": "b"}]}, now=0.5)
    updates = [a for a in sent if a.get("summary")]
    assert len(updates) == 3 and all(len(u["records"]) == RECORDS_PER_UPDATE for u in updates)  # full: left at once
    updates += rl.flush(now=1.0)
    records = [r for u in updates for r in u["records"]]
    assert [r["flow"]["uid"] for r in records] == [f"C{i}" for i in range(2, n)]  # every one, in order
    assert all(u["count"] == len(u["records"]) for u in updates)
    assert records[0] == {"ts": 102.0, "score": 7.0, "flow": {"uid": "C2"},
                          "explanation": [{"feature": "dst_bytes", "value": 2.0}, {"feature": "duration"},
                                          {"feature": "a"}]}
