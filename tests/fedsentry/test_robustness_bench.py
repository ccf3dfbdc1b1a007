"""`fedsentry bench robustness`: the table it writes (docs/robustness.md quotes it) and its JSON."""

from __future__ import annotations

import json

import pytest

from fedsentry.bench import robustness

pytestmark = pytest.mark.filterwarnings("ignore")


def test_the_bench_runs_each_column_clean_and_attacked_and_renders_the_table(tmp_path, monkeypatch, capsys):
    from fedsentry.cli import main

    monkeypatch.setattr(robustness, "FLEETS", ((1, 6),))  # one small fleet keeps the test fast
    out = tmp_path / "r.json"
    assert main(["bench", "robustness", "--attacks", "non-psd", "threshold", "--rounds", "3", "--fraction", "0.5",
                 "--out", str(tmp_path), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    table = (tmp_path / "robustness.md").read_text()
    assert {(r["algorithm"], r["attack"]) for r in doc["rows"]} == {
        (c[1], a) for c in robustness.COLUMNS for a in (None, "non-psd", "threshold")}
    fedpg = next(r for r in doc["rows"] if r["algorithm"] == "fedpg" and r["attack"] == "non-psd")
    assert "fedpg uploads a basis" in fedpg["not_applicable"]
    gmm = next(r for r in doc["rows"] if r["algorithm"] == "fedem" and r["attack"] == "non-psd")
    assert gmm["rejected_uploads"] > 0 and 0 <= gmm["recall"] <= 1
    assert "**synthetic, 1 of 6 devices attacking**" in table
    assert "| attack | gmm, support rule | gmm, trimmed mean (anchor) | pca, fedpg | pca, fedmm |" in table
    row = next(line for line in table.splitlines() if line.startswith("| non-psd |"))
    assert "refused" in row and "n/a" in row
    assert table.count("| clean |") == 1


def test_an_unknown_attack_is_named(capsys):
    from fedsentry.cli import main

    assert main(["bench", "robustness", "--attacks", "flood"]) == 2
    assert "--attacks flood: not an attack" in capsys.readouterr().err
