"""The `fedsentry simulate pca` and `bench pca` commands, run as a user runs them."""

import json
import subprocess
import sys

import numpy as np
import pytest

from models.synthetic import generate_traffic

REQUIRED = {"algorithm", "dataset", "rounds", "rank", "auc_roc", "average_precision", "f1", "threshold",
            "subspace_distance", "seconds_per_round", "upload_bytes_per_client_round", "history"}


def fedsentry(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fedsentry.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def simulate(*args):
    out = fedsentry("simulate", "pca", "--dataset", "synthetic", "--clients", "20", "--rounds", "15",
                    "--json", "-", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("algorithm", ["fedpg", "fedpe", "fedmm"])
def test_simulate_writes_the_documented_json(algorithm):
    r = simulate("--algorithm", algorithm)
    assert r.keys() >= REQUIRED
    assert r["algorithm"] == algorithm and r["dataset"] == "synthetic" and r["rounds"] == 15
    assert [h["round"] for h in r["history"]] == list(range(1, 16))
    assert {"round", "subspace_distance", "objective"} <= r["history"][0].keys()
    assert r["auc_roc"] > 0.75 and r["threshold"] > 0 and r["upload_bytes_per_client_round"] > 0


def test_baselines_follow_their_conventions():
    c = simulate("--detector", "pca", "--algorithm", "centralized")
    assert c["rounds"] == 1 and c["subspace_distance"] == 0 and len(c["history"]) == 1
    loc = simulate("--algorithm", "local")
    assert loc["upload_bytes_per_client_round"] == 0 and loc["subspace_distance"] > 0


def test_fedmm_reaches_centralised_quality_on_synthetic_traffic():
    c = simulate("--detector", "pca", "--algorithm", "centralized")
    f = simulate("--algorithm", "fedmm", "--rounds", "60", "--fraction", "0.3")
    assert f["subspace_distance"] < 0.01
    assert abs(f["auc_roc"] - c["auc_roc"]) < 0.005


def test_generic_csv_pair_and_labelled_csv(tmp_path):
    t = generate_traffic(n_devices=4, records_per_device=100, seed=5)
    header = ",".join(t.feature_names)
    np.savetxt(tmp_path / "normal.csv", t.X_normal, delimiter=",", header=header, comments="")
    np.savetxt(tmp_path / "attacks.csv", t.X_attack, delimiter=",", header=header, comments="")
    out = fedsentry("simulate", "pca", "--normal", str(tmp_path / "normal.csv"), "--abnormal",
                    str(tmp_path / "attacks.csv"), "--clients", "8", "--rounds", "10", "--json", "-")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["dataset"] == "normal.csv" and r["auc_roc"] > 0.7
    rows = np.r_[np.c_[t.X_normal, np.zeros(len(t.X_normal))], np.c_[t.X_attack, np.ones(len(t.X_attack))]]
    np.savetxt(tmp_path / "all.csv", rows, delimiter=",", header=header + ",is_attack", comments="", fmt="%g")
    out = fedsentry("simulate", "pca", "--csv", str(tmp_path / "all.csv"), "--label-column", "is_attack",
                    "--clients", "8", "--rounds", "10", "--algorithm", "fedmm", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "r.json").read_text())["n_features"] == len(t.feature_names)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "kdd"], "unknown dataset 'kdd'"),
        (["--normal", "/nonexistent.csv", "--abnormal", "/x.csv"], "file not found: /nonexistent.csv"),
        (["--normal", "/nonexistent.csv"], "--normal and --abnormal go together"),
        (["--dataset", "synthetic", "--rank", "11"], "--rank 11 must be smaller than the number of features (11)"),
        (["--dataset", "synthetic", "--fraction", "0"], "--fraction: must be in (0, 1]"),
        (["--dataset", "synthetic", "--fraction", "1.5"], "--fraction: must be in (0, 1]"),
        (["--dataset", "synthetic", "--clients", "100000"], "--clients 100000 is more than the"),
        (["--dataset", "synthetic", "--rounds", "x"], "expected a whole number, got 'x'"),
        (["--dataset", "synthetic", "--algorithm", "fedavg"], "invalid choice: 'fedavg'"),
        (["--dataset", "synthetic", "--partition-feature", "nope"], "--partition-feature 'nope' is not a feature"),
        (["--dataset", "synthetic", "--csv", "a.csv"], "give only one of --dataset, --csv"),
    ],
)
def test_bad_input_is_one_line_with_status_2(args, message):
    out = fedsentry("simulate", "pca", *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert message in lines[0]


def test_csv_with_nan_and_mismatched_columns(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,2\n2,nan\n")
    (tmp_path / "b.csv").write_text("x,z\n1,2\n")
    out = fedsentry("simulate", "pca", "--normal", str(tmp_path / "a.csv"), "--abnormal", str(tmp_path / "b.csv"))
    assert out.returncode == 2 and "column 'y' has a missing, NaN or infinite value on line 3" in out.stderr
    (tmp_path / "a.csv").write_text("x,y\n1,2\n2,3\n")
    out = fedsentry("simulate", "pca", "--normal", str(tmp_path / "a.csv"), "--abnormal", str(tmp_path / "b.csv"))
    assert out.returncode == 2 and "different feature columns" in out.stderr


def test_bench_writes_table_plot_and_json(tmp_path):
    out = fedsentry("bench", "pca", "--dataset", "synthetic", "--clients", "20", "--rounds", "10", "--quick",
                    "--kernel-features", "200",  # the kernel rows at D=1000 take a minute here
                    "--out", str(tmp_path), "--json", str(tmp_path / "b.json"))
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "pca-synthetic.md").read_text()
    assert "| fedmm |" in table and "IsolationForest" in table and "records/s" in table
    assert "gmm fedem" in table and "nearest-neighbour" in table and "kernel PCA (rff)" in table
    assert (tmp_path / "pca-synthetic.png").read_bytes()[:4] == b"\x89PNG"
    b = json.loads((tmp_path / "b.json").read_text())
    for detector in ("pca", "gmm"):
        assert b["scoring"][detector]["records_per_second"] > 0
        assert b["scoring"][detector]["scoring_process_peak_rss_mb"] > 0
    assert {r["algorithm"] for r in b["results"]} >= {"centralized", "local", "fedpe", "fedpg", "fedmm",
                                                     "isolation-forest", "fedem", "1-nn"}


def test_mixture_model_selection_without_labels(tmp_path):
    out = fedsentry("simulate", "pca", "--detector", "gmm", "--select", "--dataset", "synthetic", "--clients", "10",
                    "--rounds", "4", "--components", "4", "--json", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr
    r = json.loads((tmp_path / "s.json").read_text())
    candidates = r["selection"]
    assert len(candidates) == 5 and len({c["reg"] for c in candidates}) == 5
    best = min(candidates, key=lambda c: c["holdout_nll"])
    assert r["reg"] == best["reg"] and r["auc_roc"] == best["auc_roc"]
    bad = fedsentry("simulate", "pca", "--detector", "gmm", "--select", "--reg", "0.1", "--dataset", "synthetic")
    assert bad.returncode == 2 and "--select chooses the ridge" in bad.stderr


@pytest.mark.parametrize(("flags", "message"), [
    (["--hard-rounds", "-1"], "--hard-rounds: hard_rounds must be between 0 and 100000"),
    (["--components", "2000"], "--components: components must be between 1 and 1024"),
    (["--holdout", "0"], "--holdout: must be in [0.05, 0.5]"),
])
def test_bad_mixture_settings_name_their_flag(flags, message):
    out = fedsentry("simulate", "pca", "--detector", "gmm", "--dataset", "synthetic", "--clients", "5", "--rounds", "2",
                    *flags)
    assert out.returncode == 2 and message in out.stderr


def test_simulate_with_compliant_rogues_reports_them_and_refuses_what_it_cannot_do():
    r = simulate("--clients", "11", "--adversaries", "1", "--attack", "compliant")
    assert r["adversaries"] == 1 and r["attack"] == "compliant" and r["detector"] == "gmm"
    assert r["shared_components"] < r["components"]  # the rogue's attack components stay out of the fleet's model
    assert r["recall"] > 0.6
    out = fedsentry("simulate", "pca", "--dataset", "synthetic", "--adversaries", "20", "--clients", "20")
    assert out.returncode == 2 and "--adversaries 20: must be between 1 and --clients - 1 (19)" in out.stderr


@pytest.mark.parametrize(("flags", "message"), [
    (["--attack", "threshold"], "--attack threshold needs --adversaries K"),
    (["--adversaries", "1", "--attack", "rotated"], "--attack rotated with --detector gmm: rotated turns a PCA upload"),
    (["--adversaries", "1", "--attack", "non-psd", "--detector", "pca"],
     "--attack non-psd with --detector pca: non-psd needs uploads of second moments the server can check: fedpg"),
    (["--adversaries", "1", "--attack", "random", "--detector", "pca", "--algorithm", "centralized"],
     "--algorithm centralized has no federation"),
    (["--attack", "flood", "--adversaries", "1"], "argument --attack: invalid choice: 'flood'"),
    (["--min-support", "-1"], "--min-support: min_support must be between 0"),
    (["--min-support", "2000"], "--min-support: min_support must be between 0 (every component shared) and 1000"),
    (["--min-support", "2", "--detector", "pca"],
     "--min-support is a parameter of fedem: it applies to --detector gmm"),
    (["--min-support", "2", "--algorithm", "centralized", "--detector", "gmm"], "--algorithm centralized has no "
     "devices to count"),
    (["--support-proofs", "--detector", "gmm"], "--support-proofs proves private mode's support rows: add --detector "
     "gmm --private"),
    (["--support-proofs", "--detector", "pca", "--private"], "--support-proofs proves private mode's support rows"),
    (["--adversaries", "1", "--attack", "support-inflate", "--detector", "pca"],
     "--attack support-inflate with --detector pca: support-inflate lies in a private mixture's support row"),
    (["--adversaries", "1", "--attack", "support-inflate", "--detector", "gmm"],
     "--attack support-inflate lies in a masked support row: private mode's (--private)"),
    (["--adversaries", "1", "--attack", "support-nonbit", "--detector", "pca"],
     "--attack support-nonbit with --detector pca: support-nonbit lies in a private mixture's support row"),
    (["--adversaries", "1", "--attack", "support-nonbit", "--detector", "gmm"],
     "--attack support-nonbit lies in a masked support row: private mode's (--private)"),
])
def test_bad_attack_and_support_flags_say_which_and_why(flags, message, capsys):
    from fedsentry.cli import main

    assert main(["simulate", "pca", "--dataset", "synthetic", "--clients", "11", "--rounds", "2", *flags]) == 2
    assert message in capsys.readouterr().err


def test_min_support_zero_shares_every_component_and_attacks_run_for_pca():
    r = simulate("--clients", "11", "--min-support", "0", "--rounds", "5")
    assert r["shared_components"] == r["components"]
    p = simulate("--detector", "pca", "--algorithm", "fedmm", "--clients", "11", "--adversaries", "2", "--attack",
                 "non-psd", "--fraction", "0.5")
    assert p["attack"] == "non-psd" and p["adversaries"] == 2 and p["rejected_uploads"] > 0


@pytest.mark.parametrize(("flags", "message"), [
    (["--dp-epsilon", "0"], "--dp-epsilon: must be in (0, 100]"),
    (["--dp-epsilon", "1", "--dp-delta", "0.5"], "--dp-delta: must be in (0, 0.01)"),
    (["--dp-delta", "1e-6"], "--dp-delta is differential privacy's: add --dp-epsilon"),
    (["--dp-epsilon", "4", "--algorithm", "centralized"], "--dp-epsilon trains fedem on noisy sums"),
])
def test_bad_dp_settings_say_which_and_why(flags, message):
    out = fedsentry("simulate", "pca", "--detector", "gmm", "--dataset", "synthetic", "--clients", "5", "--rounds", "2",
                    *flags)
    assert out.returncode == 2 and message in out.stderr


@pytest.mark.parametrize("detector", ["gmm", "pca"])
@pytest.mark.parametrize("private", [[], ["--private"]])
def test_dp_simulation_reports_its_budget(detector, private, tmp_path):
    path = tmp_path / "r.json"
    out = fedsentry("simulate", "pca", "--detector", detector, "--dataset", "synthetic", "--clients", "10",
                    "--fraction", "0.3", "--rounds", "3", "--dp-epsilon", "8", "--dp-delta", "1e-6", *private,
                    "--json", str(path))
    assert out.returncode == 0, out.stderr
    dp = json.loads(path.read_text())["dp"]
    assert dp["epsilon"] == 8 and dp["delta"] == 1e-6 and 0 < dp["epsilon_spent"] <= 8
    assert dp["noise"] == ("distributed" if private else "central") and dp["noise_multiplier"] > 0
    assert dp["clip_norms"]["h"] == 1.0 and dp["clip_norms"]["m1"] > 0
