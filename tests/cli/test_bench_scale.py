"""`fedsentry bench scale`: it runs every family at a small N, its byte figures are the sizes of the messages the real
code encodes (the round message the job runner publishes, the uploads the participants send), and bad flags are
refused by name."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from fedsentry.bench import scale
from fedsentry.cli import main
from fedsentry.runs.loopback import Loopback, detector_participants
from models.core.messages import Upload
from models.synthetic import generate_traffic
from wire.protocol import decode

FAST = ["--sample", "3", "--repeats", "1", "--rounds", "5", "--alerts", "300"]


def test_the_command_prints_every_family_and_writes_its_json(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert main(["bench", "scale", "--devices", "40", *FAST, "--data-dir", str(tmp_path / "none"),
                 "--out", str(tmp_path), "--json", str(out)]) == 0
    table = capsys.readouterr().err
    doc = json.loads(out.read_text())
    rows = doc["fleets"][0]["rows"]
    assert [(r["family"], r["algorithm"]) for r in rows] == scale.cases()
    assert {f for f, _ in scale.cases()} == {"pca", "gmm", "dict", "otmap", "recsys"}
    for r in rows:
        assert f"| 40 | {r['family']} | {r['algorithm']} | 0.3 | 12 |" in table
        assert r["sampled"] == 12 and r["upload_bytes_per_round"] == 12 * r["upload_bytes_per_device"]
        assert r["fanout_bytes_per_round"] == 40 * r["round_message_bytes"]
        assert r["server_step_s_per_round"] > 0 and r["upload_messages_per_s"] > 0
    assert doc["alerts"]["rows_per_s"] > 0 and doc["fleets"][0]["peak_mib"] > 50
    assert "rows/s stored" in table and (tmp_path / "scale.md").read_text() in table


@pytest.fixture
def finished(tmp_path):
    """A pca job run to its end on a loopback of 3 devices."""
    t = generate_traffic(n_devices=3, records_per_device=200, seed=1)
    parts = np.array_split(t.X_normal, 3)
    loop = Loopback(tmp_path, "pca", "fedmm", {"features": t.feature_names, "rounds": 2},
                    detector_participants(tmp_path, "pca", t.feature_names, parts))
    loop.run()
    yield loop
    loop.engine.dispose()


def test_the_round_message_is_the_one_the_runner_publishes_for_n_devices(finished):
    runner = finished.runner
    size, sampled = scale.fleet_message(runner, 1_000, {"train"})
    assert size == len(runner.message)  # what it published, as encoded
    msg = decode(runner.message)
    assert msg.meta["phase"] == "train" and len(msg.meta["sampled"]) == sampled == 300
    assert set(msg.meta["sampled"]) <= set(runner.participants) and len(runner.participants) == 1_000
    # above models.core.sampling.LIST_MAX participants the round carries a draw, not its list: no growth
    bigger, asked = scale.fleet_message(runner, 2_000, {"train"})
    drawn = decode(runner.message)
    assert bigger == len(runner.message) < size and asked == 600
    assert not drawn.meta.get("sampled") and drawn.meta["salt"] is not None and drawn.meta["bound"] is not None
    most, _ = scale.fleet_message(runner, 100_000, {"train"})
    assert abs(most - bigger) <= 32  # the same message but for the digits of its numbers


def test_upload_bytes_are_the_encoded_uploads_the_participants_send(tmp_path, monkeypatch):
    sent: list[int] = []
    answers = Loopback.answers

    def spy(self, message):
        replies = answers(self, message)
        sent.extend(len(p) for p in replies if decode(p).kind == Upload.kind)
        return replies

    monkeypatch.setattr(Loopback, "answers", spy)
    row, _ = scale.measure(f"sqlite:///{tmp_path}/s.db", tmp_path / "dict", "dict", "fedmm-dl", 100, 3, 1,
                           str(tmp_path / "none"), rounds=5)
    assert sent and row["upload_bytes_per_device"] == statistics.median(sent)
    assert row["upload_bytes_per_round"] == 30 * statistics.median(sent)


@pytest.mark.parametrize("flags, says", [
    (["--devices", "0"], "--devices: must be at least 1, got 0"),
    (["--devices", "-5"], "--devices: must be at least 1, got -5"),
    (["--devices", "many"], "--devices: expected a whole number, got 'many'"),
    (["--devices", "1e6"], "--devices: expected a whole number, got '1e6'"),
    (["--sample", "1"], "--sample: at least 2 devices"),
    (["--rounds", "4", "--repeats", "1"], "--rounds: at least 5"),
    (["--db", "sqlite:///x.db"], "--db: a PostgreSQL server's URL"),
    (["--db", "postgresql://postgres@127.0.0.1:1/x"], "--db: connection failed"),
])
def test_bad_flags_are_refused_naming_the_flag(flags, says, capsys, tmp_path):
    assert main(["bench", "scale", *flags, "--out", str(tmp_path)]) == 2
    assert says in capsys.readouterr().err
