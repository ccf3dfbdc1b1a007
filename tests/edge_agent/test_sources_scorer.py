import numpy as np
import pytest

from edge_agent.scorer import RateLimiter
from edge_agent.sources import Batch, SchemaError, ZeekFollower, csv_source, json_lines, select

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
    assert X.tolist() == [[1, 1.5, 10, 0, 1]]


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


def test_rate_limiter_turns_a_burst_into_one_summary():
    rl = RateLimiter(burst=3, window=10.0, started=0.0)
    sent = []
    for i in range(10):
        sent += rl.admit({"id": str(i), "score": float(i)}, now=1.0)
    assert [a["id"] for a in sent] == ["0", "1", "2"]
    summary = rl.flush(now=11.0)
    assert len(summary) == 1 and summary[0]["count"] == 7 and summary[0]["score"] == 9.0 and summary[0]["summary"]
