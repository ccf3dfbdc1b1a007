import logging

import numpy as np
import pytest

from fedsentry.data import datasets
from fedsentry.errors import UsageError


def write(path, text):
    path.write_text(text)
    return path


def test_reads_numeric_columns_drops_index_and_text_columns(tmp_path, caplog):
    f = write(tmp_path / "n.csv", ",a,proto,b,label\n0,1,tcp,2.5,0\n1,3,udp,4,1\n2,5,tcp,1e3,0\n")
    with caplog.at_level(logging.WARNING):
        names, X, labels = datasets.read_csv(f)
    assert names == ["a", "b"] and X.tolist() == [[1, 2.5], [3, 4], [5, 1000]]
    assert labels == ["0", "1", "0"]
    assert "(unnamed) (index column)" in caplog.text and "proto (not numeric)" in caplog.text


def test_labelled_csv_splits_on_the_normal_value_and_drops_constant_columns(tmp_path, caplog):
    f = write(tmp_path / "x.csv", "x,y,const,Outcome\n1,2,7,normal\n2,1,7,neptune\n3,5,7,normal\n0,0,7,smurf\n")
    with caplog.at_level(logging.WARNING):
        data = datasets.load_labelled_csv(f, None, "normal")
    assert data.feature_names == ["x", "y"]
    assert len(data.X_normal) == 2 and len(data.X_attack) == 2
    assert "const" in caplog.text and "zero-variance" in caplog.text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("a,b\n", "no data rows"),
        ("a,b\n1,2\n3\n", "line 3 has 1 fields"),
        ("a,b\nx,y\nz,w\n", "no numeric feature columns"),
        ("a,b\n1,2\n3,nan\n", "column 'b' has a missing, NaN or infinite value on line 3"),
        ("a,b\n1,2\n3,\n", "column 'b' has a missing"),
        ("a,b\n1,inf\n3,4\n", "column 'b'"),
    ],
)
def test_bad_files_name_the_problem(tmp_path, content, message):
    f = write(tmp_path / "bad.csv", content)
    with pytest.raises(UsageError, match=message):
        datasets.read_csv(f)


def test_pair_with_different_columns_is_refused(tmp_path):
    a = write(tmp_path / "a.csv", "x,y\n1,2\n2,3\n")
    b = write(tmp_path / "b.csv", "x,z\n1,2\n2,3\n")
    with pytest.raises(UsageError, match=r"only in a.csv: \['y'\]; only in b.csv: \['z'\]"):
        datasets.load_pair(a, b)


def test_missing_file_and_unknown_dataset(tmp_path):
    with pytest.raises(UsageError, match="file not found"):
        datasets.read_csv(tmp_path / "nope.csv")
    with pytest.raises(UsageError, match="unknown dataset 'kdd99'"):
        datasets.load_named("kdd99")
    with pytest.raises(UsageError, match="not found under"):
        datasets.load_named("nsl-kdd", str(tmp_path))


def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSENTRY_DATA_DIR", str(tmp_path))
    assert datasets.data_dir() == tmp_path
    assert datasets.data_dir("/x") == datasets.Path("/x")
    monkeypatch.delenv("FEDSENTRY_DATA_DIR")
    assert datasets.data_dir().name == "data" and datasets.data_dir().parent.name == "shared"


def test_split_is_seeded_and_keeps_attacks_out_of_training():
    data = datasets.TrafficData("t", ["a"], np.arange(100.0)[:, None], -np.arange(1, 41.0)[:, None])
    s1, s2 = datasets.train_test_split(data, seed=1), datasets.train_test_split(data, seed=1)
    assert np.array_equal(s1.X_train, s2.X_train)
    assert len(s1.X_train) == 70 and (s1.X_train >= 0).all()
    assert s1.y_test.sum() == 40 and len(s1.X_test) == 70
    mixed = datasets.train_test_split(data, seed=1, contamination=0.1)
    assert (mixed.X_train < 0).sum() == 8 and mixed.y_test.sum() == 32  # moved, not copied
