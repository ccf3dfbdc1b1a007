"""`fedsentry sample`: a labelled traffic set the agent's own readers take, the same bytes for the same seed."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from edge_agent.agent import training_source
from edge_agent.sources import REJECTED_STATES, ZeekFollower, csv_source, select
from fedsentry.cli import main
from fedsentry.data.datasets import load_labelled_csv
from models.synthetic import FEATURES

DEVICES = ("dev-1", "dev-2", "dev-3")


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample")
    assert main(["sample", "--out", str(out)]) == 0
    return out


def _features(batches) -> np.ndarray:
    return np.vstack([select(b, FEATURES) for b in batches])


def test_every_device_has_its_files_and_the_readme_names_them_and_the_features(sample):
    names = {p.name for p in sample.iterdir()}
    assert names == {"README.txt", *(f"{d}-{f}" for d in DEVICES
                                     for f in ("train.csv", "replay.csv", "conn.log", "train-conn.log"))}
    readme = (sample / "README.txt").read_text()
    assert ",".join(FEATURES) in readme
    for f in ("ID-train.csv", "ID-replay.csv", "ID-conn.log", "--label-column label", "--zeek"):
        assert f in readme, f


def test_the_agents_readers_take_the_csvs_and_the_labels_stay_out_of_the_features(sample, caplog):
    caplog.set_level(logging.WARNING)
    for d in DEVICES:
        train = list(training_source(str(sample / f"{d}-train.csv")))
        assert train[0].columns == FEATURES and train[0].labels is None
        assert len(_features(train)) >= 100
        replay = list(csv_source(sample / f"{d}-replay.csv", label_column="label"))
        assert replay[0].columns == FEATURES  # `label` is not a feature
        labels = np.concatenate([b.labels for b in replay])
        assert set(labels) == {0.0, 1.0} and 0.05 < labels.mean() < 0.3  # mostly normal, attacks in it
        assert np.isfinite(_features(replay)).all()
        data = load_labelled_csv(sample / f"{d}-replay.csv", "label", "0")  # simulate --csv reads it too
        assert len(data.X_attack) == int(labels.sum())
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_the_zeek_log_reads_back_as_the_replay_records_without_a_warning(sample, caplog):
    caplog.set_level(logging.WARNING)
    for d in DEVICES:
        log = sample / f"{d}-conn.log"
        lines = log.read_text().splitlines()
        assert lines[0] == "#separator \\x09"
        fields = next(line for line in lines if line.startswith("#fields")).split("\t")[1:]
        types = next(line for line in lines if line.startswith("#types")).split("\t")[1:]
        assert fields == ["ts", "uid", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p", "proto", "service",
                          "duration", "orig_bytes", "resp_bytes", "conn_state", "missed_bytes", "history",
                          "orig_pkts", "orig_ip_bytes", "resp_pkts", "resp_ip_bytes"]
        assert len(types) == len(fields) and types[0] == "time" and types[2] == "addr"
        assert lines[-1].startswith("#close\t")
        follower = ZeekFollower(log)  # --zeek
        batch = follower.poll()
        assert follower.malformed == 0 and follower.poll() is None
        from_zeek = select(batch, FEATURES)
        as_training = _features(training_source(str(log)))  # --train: strict, a bad line would raise
        replay = list(csv_source(sample / f"{d}-replay.csv", label_column="label"))
        assert np.array_equal(from_zeek, _features(replay)) and np.array_equal(as_training, from_zeek)
        rejected = np.isin(batch.text["conn_state"].astype(str), list(REJECTED_STATES))
        assert np.array_equal(rejected, from_zeek[:, FEATURES.index("conn_rejected")] == 1)
        assert len(set(batch.text["uid"])) == len(batch.X)
        assert np.all(np.diff(batch.text["ts"].astype(float)) > 0)
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_ones(sample, tmp_path):
    assert main(["sample", "--out", str(tmp_path / "again")]) == 0
    assert main(["sample", "--out", str(tmp_path / "other"), "--seed", "7", "--devices", "2"]) == 0
    for p in sample.iterdir():
        assert (tmp_path / "again" / p.name).read_bytes() == p.read_bytes(), p.name
    assert sorted(q.name for q in (tmp_path / "other").iterdir()) == [
        "README.txt", "dev-1-conn.log", "dev-1-replay.csv", "dev-1-train-conn.log", "dev-1-train.csv", "dev-2-conn.log",
        "dev-2-replay.csv", "dev-2-train-conn.log", "dev-2-train.csv"]
    assert (tmp_path / "other" / "dev-1-train.csv").read_bytes() != (sample / "dev-1-train.csv").read_bytes()


@pytest.mark.parametrize(("flags", "words"), [
    (["--devices", "0"], ["--devices", "at least 1"]),
    (["--devices", "three"], ["--devices", "whole number"]),
    (["--devices", "100000"], ["--devices", "at most"]),
    (["--seed", "-1"], ["--seed", "0 or more"]),
])
def test_bad_flags_are_refused_naming_the_flag(tmp_path, capsys, flags, words):
    assert main(["sample", "--out", str(tmp_path / "s"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedsentry: error: sample: argument ") and all(w in err for w in words), err
    assert not (tmp_path / "s").exists()


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["sample", "--out", str(tmp_path / "f")]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["sample"]) == 2
    assert "--out" in capsys.readouterr().err


def test_sample_needs_neither_the_server_nor_the_simulators(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from fedsentry.cli import main; assert main(['sample', '--out', sys.argv[1]]) == 0; "
            "print(' '.join(m for m in ('sqlalchemy', 'fastapi', 'store', 'coordinator', 'paho', "
            "'fedsentry.cli.server') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", out.stdout  # the base install (numpy) is enough
