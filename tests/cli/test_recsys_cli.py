"""`fedsentry simulate recsys` and `bench recsys`, run as a user runs them."""

import json
import subprocess
import sys

import numpy as np
import pytest

from fedsentry.cli import main
from fedsentry.data.ratings import load_named, load_ratings_csv, movielens_available
from fedsentry.errors import UsageError
from models.recsys.data import from_triples, train_test_split
from models.recsys.synthetic import generate_ratings

REQUIRED = {"algorithm", "rank", "rounds", "test_rmse", "test_mae", "seconds_per_round",
            "upload_bytes_per_client_round", "history", "dataset", "clients", "fraction"}
FAST = ["--dataset", "synthetic", "--clients", "20", "--rounds", "8", "--rank", "4"]


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def error_line(capsys, *args) -> str:
    code, out, err = run(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("fedsentry: error: "), err
    assert "Traceback" not in err and out == ""
    return lines[0]


def write_csv(path, text):
    path.write_text(text)
    return str(path)


def test_simulate_writes_the_documented_json_to_stdout():
    out = subprocess.run([sys.executable, "-m", "fedsentry.cli", "simulate", "recsys", *FAST, "--json", "-"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r.keys() >= REQUIRED
    assert r["algorithm"] == "fedmc-admm" and r["rank"] == 4 and r["rounds"] == 8
    assert [h["round"] for h in r["history"]] == list(range(1, 9))
    assert {"round", "test_rmse", "objective"} <= r["history"][0].keys()
    assert 0 < r["test_rmse"] < 1.5 and 0 < r["test_mae"] < r["test_rmse"]
    assert r["upload_bytes_per_client_round"] > 0 and r["seconds_per_round"] > 0
    assert "test_rmse=" in out.stderr  # logs go to stderr, the JSON alone to stdout


@pytest.mark.parametrize("algorithm", ["fedmavg", "altgdmin", "centralized"])
def test_every_algorithm_runs(capsys, tmp_path, algorithm):
    code, _, err = run(capsys, "simulate", "recsys", *FAST, "--algorithm", algorithm, "--json",
                       str(tmp_path / "r.json"))
    assert code == 0, err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["algorithm"] == algorithm and r["test_rmse"] < r["global_mean_test_rmse"]


def test_private_runs_beside_plaintext_and_refuses_what_it_cannot(capsys, tmp_path):
    """--private: the same model to fixed-point error, both byte counts in the JSON; refusals name the flag."""
    results = {}
    for mode in ([], ["--private", "--private-dropout", "0.3"]):
        code, _, err = run(capsys, "simulate", "recsys", *FAST, *mode, "--json", str(tmp_path / "r.json"))
        assert code == 0, err
        results[bool(mode)] = json.loads((tmp_path / "r.json").read_text())
    plain, private = results[False], results[True]
    assert plain["private"] is False and private["private"] is True
    assert abs(plain["test_rmse"] - private["test_rmse"]) < 1e-6
    assert private["plaintext_upload_bytes_per_device_round"] == plain["upload_bytes_per_device_round"] > 0
    assert private["upload_bytes_per_device_round"] > 0 and private["secure_sum"]["dropout"] == 0.3
    assert "--private-dropout 0.4" in error_line(capsys, "simulate", "recsys", *FAST, "--private",
                                                  "--private-dropout", "0.4")
    assert "add --private" in error_line(capsys, "simulate", "recsys", *FAST, "--private-dropout", "0.1")
    assert "centralized is not federated" in error_line(capsys, "simulate", "recsys", *FAST, "--private",
                                                        "--algorithm", "centralized")


@pytest.mark.alone  # a wall-clock bound
def test_any_ratings_csv_with_named_columns_and_recommendations(capsys, tmp_path):
    r = generate_ratings(n_users=60, n_items=80, mean_ratings=20, seed=4)
    lines = ["item,who,stars,extra"] + [f"m{i},u{u},{v:g},x" for u, i, v in zip(r.user, r.item, r.rating)]
    path = write_csv(tmp_path / "r.csv", "\n".join(lines) + "\n")
    code, out, err = run(capsys, "simulate", "recsys", "--ratings", path, "--user-col", "who", "--item-col", "item",
                         "--rating-col", "stars", "--clients", "6", "--rounds", "5", "--rank", "3",
                         "--recommend", "u3", "--fold-in", "m1=5,m2=4.5", "--top", "4", "--json", "-")
    assert code == 0, err
    res = json.loads(out)
    known, new = res["recommendations"]["known_user"], res["recommendations"]["fold_in"]
    assert known["user"] == "u3" and known["computed_on"].startswith("client")
    assert len(known["items"]) == 4 and not {e["item"] for e in new["items"]} & {"m1", "m2"}
    train, _ = train_test_split(load_ratings_csv(path, "who", "item", "stars"), 0.2, seed=0)
    rated = set(train.item_ids[train.item[train.user_ids[train.user] == "u3"]])
    assert len(rated) >= 5 and not {e["item"] for e in known["items"]} & rated  # held-out items may come back
    assert new["seconds"] < 1.0


BAD_FILES = [
    ("", "empty file"),
    ("userId,movieId,rating\n", "no ratings after the header"),
    ("userId,movieId\n1,2\n", "no column 'rating'"),
    ("userId,movieId,rating\n1,2,4\n1,3,great\n", "line 3: rating 'great' is not a number"),
    ("userId,movieId,rating\n1,2,4\n1,3\n", "line 3 has 2 fields"),
    ("userId,movieId,rating\n1,2,4\n2,3,7\n", "rating 7 on line 3 is outside the declared range 0.5..5"),
    ("userId,movieId,rating\n1,2,4\n1,2,3\n", "user 1 rated item 2 twice (lines 2 and 3)"),
    ("userId,movieId,rating\n1,2,4\n\n3,3,1\n1,2,3\n", "user 1 rated item 2 twice (lines 2 and 5)"),
    ("userId,movieId,rating\n1,2,4\n\n3,3,0\n", "rating 0 on line 4 is outside"),
    ("userId,movieId,rating\n1,2,4\n1,3,nan\n", "line 3: rating 'nan' is not a finite number"),
    ("userId,movieId,rating\n1,2,4\n,3,4\n", "line 3 has an empty userId"),
    ("userId,movieId,rating,x\n1,2,4,a\n,,,b\n", "line 3 has an empty userId"),
    ("userId,movieId,rating\nu1,m2,4\nu1,m2,3\n", "user u1 rated item m2 twice (lines 2 and 3)"),
]


@pytest.mark.parametrize("content, message", BAD_FILES)
def test_bad_ratings_files_are_one_line_errors(capsys, tmp_path, content, message):
    path = write_csv(tmp_path / "bad.csv", content)
    assert message in error_line(capsys, "simulate", "recsys", "--ratings", path, "--clients", "1")


@pytest.mark.parametrize("reader", ["arrow", "python"])
@pytest.mark.parametrize("content, message", BAD_FILES)
def test_both_readers_name_the_same_bad_line(tmp_path, reader, content, message):
    if reader == "arrow":
        pytest.importorskip("pyarrow")
    path = write_csv(tmp_path / "bad.csv", content)
    with pytest.raises(UsageError) as e:
        load_ratings_csv(path, reader=reader)
    assert message in str(e.value)


GOOD_FILES = [
    "userId,movieId,rating,timestamp\n5,10,4,1\n1,3,3.5,1\n5,3,1,2\n2,10,0.5,3\n",  # ids out of order
    "userId,movieId,rating\n1,10,4\n\n2,3,3.5\n,,\n\n",  # blank lines
    "userId,movieId,rating\nu1,m2,4\nu2,m1,3\n u1 ,m1,2\n",  # text ids, spaces around
    "userId,movieId,rating\n+7,007,4\n7,8,3\n1.0,9,2\n",  # whole numbers as int() reads them, then text
    'userId,movieId,rating\n"1","2","4"\n"1","x,y","3"\n',  # quoted
    "userId,movieId,rating\r\n1,2,4,9,9\r\n1,3,4.5\r\n",  # longer rows, CRLF
    "userId,movieId,rating\n-5,2,4\n5000000000,3,4.5\n",  # ids past int32
]


@pytest.mark.parametrize("content", GOOD_FILES)
def test_readers_give_the_ratings_of_the_line_by_line_parse(tmp_path, content):
    """The arrow reader, the csv-module reader and from_triples on the parsed fields (what the reader
    did before) agree on arrays and dtypes."""
    pytest.importorskip("pyarrow")
    path = write_csv(tmp_path / "r.csv", content)
    rows = [[f.strip() for f in line.split(",")] for line in content.replace('"', "").splitlines()[1:] if
            line.strip(", ")]
    if "x,y" in content:
        rows = [["1", "2", "4"], ["1", "x,y", "3"]]

    def ids(col):
        try:
            return np.array([int(r[col]) for r in rows], dtype=np.int64)
        except ValueError:
            return np.array([r[col] for r in rows])

    want = from_triples(ids(0), ids(1), [float(r[2]) for r in rows], name="r")
    for reader in ("arrow", "python"):
        got = load_ratings_csv(path, reader=reader)
        for k in ("user", "item", "rating", "user_ids", "item_ids"):
            np.testing.assert_array_equal(getattr(got, k), getattr(want, k), err_msg=f"{reader} {k}")
            assert getattr(got, k).dtype == getattr(want, k).dtype, (reader, k)
        assert (got.name, got.rating_min, got.rating_max) == ("r", 0.5, 5.0)


def test_the_reader_needs_no_pyarrow(tmp_path):
    """An edge agent's base install (numpy, paho-mqtt) reads its ratings shard with the csv module."""
    path = write_csv(tmp_path / "r.csv", "userId,movieId,rating\n1,2,4\n2,2,3\n")
    code = f"""
import sys
class NoArrow:
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError("no pyarrow on an edge agent")
sys.meta_path.insert(0, NoArrow())
from fedsentry.data.ratings import load_ratings_csv
r = load_ratings_csv({str(path)!r})
print(len(r), r.n_users, "pyarrow" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2", "False"]


def test_a_million_rating_csv_loads_at_16_bytes_a_rating(tmp_path):
    pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    n = 1_000_000
    key = np.sort(rng.choice(6000 * 4000, n, replace=False))
    stars = rng.integers(1, 11, n) / 2
    lines = np.char.add(np.char.add(np.char.add((key // 4000 + 1).astype(str), ","),
                                    np.char.add((key % 4000 + 1).astype(str), ",")), stars.astype(str))
    path = tmp_path / "big.csv"
    path.write_text("userId,movieId,rating\n" + "\n".join(lines.tolist()) + "\n")
    r = load_ratings_csv(path)
    assert len(r) == n and r.user.dtype == r.item.dtype == np.int32
    held = sum(a.nbytes for a in (r.user, r.item, r.rating, r.user_ids, r.item_ids))
    assert held / n <= 17  # the issue asks for at most 50
    np.testing.assert_array_equal(r.rating, stars)


def test_netflix_synthetic_from_the_command_line(capsys):
    code, out, err = run(capsys, "simulate", "recsys", "--dataset", "netflix-synthetic", "--synthetic-scale", "0.002",
                         "--clients", "8", "--rounds", "2", "--json", "-")
    assert code == 0, err
    res = json.loads(out)
    assert res["dataset"] == "netflix-synthetic" and (res["n_users"], res["n_items"]) == (960, 17770)
    assert res["n_train"] + res["n_test"] == 200_961 and res["rating_range"] == [1.0, 5.0]
    assert res["test_rmse"] < res["global_mean_test_rmse"]
    assert "applies to --dataset netflix-synthetic" in error_line(capsys, "simulate", "recsys", *FAST,
                                                                  "--synthetic-scale", "0.5")


def test_missing_file_unknown_ids_and_impossible_ranks(capsys, tmp_path):
    assert "file not found" in error_line(capsys, "simulate", "recsys", "--ratings", str(tmp_path / "no.csv"))
    assert "unknown user id '99999'" in error_line(capsys, "simulate", "recsys", *FAST, "--recommend", "99999")
    assert "unknown item id '123456'" in error_line(capsys, "simulate", "recsys", *FAST, "--fold-in", "123456=4")
    assert "outside 0.5..5" in error_line(capsys, "simulate", "recsys", *FAST, "--fold-in", "3=9")
    assert "ITEM=RATING" in error_line(capsys, "simulate", "recsys", *FAST, "--fold-in", "3")
    assert "larger than the data allows" in error_line(capsys, "simulate", "recsys", "--dataset", "synthetic",
                                                       "--rank", "700")
    assert "more than the 600 users" in error_line(capsys, "simulate", "recsys", "--dataset", "synthetic",
                                                   "--clients", "601")
    assert "below --rating-max" in error_line(capsys, "simulate", "recsys", *FAST, "--rating-min", "5")
    assert "unknown dataset" in error_line(capsys, "simulate", "recsys", "--dataset", "netflix")
    assert "--algorithms: unknown sgd" in error_line(capsys, "bench", "recsys", *FAST, "--algorithms", "sgd")
    assert "fedmc-admm option" in error_line(capsys, "simulate", "recsys", *FAST, "--algorithm", "fedmavg",
                                             "--regularizer", "l1")
    path = write_csv(tmp_path / "r.csv", "userId,movieId,rating\n1,1,4\n2,2,3\n3,3,5\n")
    assert "larger than the data allows" in error_line(capsys, "simulate", "recsys", "--ratings", path,
                                                       "--clients", "1", "--rank", "3")


def test_bench_writes_table_plot_and_json(capsys, tmp_path):
    out = tmp_path / "results"
    code, _, err = run(capsys, "bench", "recsys", "--dataset", "synthetic", "--clients", "20", "--rounds", "5",
                       "--ranks", "3", "--out", str(out), "--json", str(tmp_path / "all.json"))
    assert code == 0, err
    table = (out / "recsys-synthetic.md").read_text()
    for name in ("fedmc-admm", "fedmc-admm (l1)", "fedmavg", "altgdmin", "centralized"):
        assert f"| {name} | 3 |" in table
    assert "fedsentry bench recsys --dataset synthetic" in table
    assert (out / "recsys-synthetic.png").read_bytes()[:4] == b"\x89PNG"
    doc = json.loads((tmp_path / "all.json").read_text())
    assert [r["algorithm"] for r in doc["runs"]] == ["fedmc-admm", "fedmc-admm", "fedmavg", "altgdmin", "centralized"]
    assert [r.get("regularizer") for r in doc["runs"][:2]] == ["l2", "l1"]
    assert json.loads((out / "recsys-synthetic.json").read_text())["runs"][0]["rank"] == 3


@pytest.mark.skipif(not movielens_available(), reason="movielens-small not found under the shared data folder")
def test_movielens_small_loads_and_fedmc_admm_learns(capsys):
    r = load_named("movielens-small")
    assert (len(r), r.n_users, r.n_items) == (100836, 610, 9724)
    assert r.rating.min() == 0.5 and r.rating.max() == 5.0
    code, out, err = run(capsys, "simulate", "recsys", "--dataset", "movielens-small", "--rounds", "20",
                         "--json", "-")
    assert code == 0, err
    res = json.loads(out)
    assert res["dataset"] == "movielens-small" and res["n_test"] == 20167
    assert res["test_rmse"] < 0.95 < res["global_mean_test_rmse"]


def test_default_dataset_is_synthetic_without_the_shared_data(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSENTRY_DATA_DIR", str(tmp_path))
    code, out, err = run(capsys, "simulate", "recsys", "--clients", "10", "--rounds", "2", "--json", "-")
    assert code == 0, err
    assert json.loads(out)["dataset"] == "synthetic"
    assert np.isfinite(json.loads(out)["test_rmse"])
