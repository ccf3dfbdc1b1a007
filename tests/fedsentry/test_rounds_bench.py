"""`fedsentry bench rounds`: the server step timed for every federated PCA algorithm and for FedEM (in a process
of its own, with its peak memory), small enough to run in the suite."""

from __future__ import annotations

import json

from fedsentry.cli import main


def test_bench_rounds_measures_pca_and_the_mixture_table(tmp_path, capsys):
    assert main(["bench", "rounds", "--clients", "300", "--sampled", "5", "--rounds", "3", "--features", "6",
                 "--mixture-features", "4", "--components", "8", "--out", str(tmp_path), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["algorithm"] for r in doc["rows"]} == {"fedpe", "fedpg", "fedmm"}
    (gmm,) = doc["mixtures"]
    assert gmm["clients"] == 300 and gmm["table_rows"] == 300 == gmm["rows_in_use"]  # room for every device
    assert gmm["fill_rounds"] == 60 and 0 < gmm["median_round_seconds"] <= gmm["max_round_seconds"]
    assert gmm["peak_mib"] > 10 and gmm["stored_bytes_per_round"] > 0
    assert "FedEM (gmm)" in (tmp_path / "rounds.md").read_text()


def test_bench_rounds_refuses_a_mixture_it_cannot_build_before_running(tmp_path, capsys):
    for flags, says in ((["--components", "5000"], "--components 5000: components must be between 1 and 1024"),
                        (["--mixture-features", "2000"], "more than a message carries")):
        assert main(["bench", "rounds", "--clients", "10", "--out", str(tmp_path), *flags]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "rounds.md").exists()
