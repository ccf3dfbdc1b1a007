"""Seed 003 Fig. 3 in small (models.otmap.paper; `fedsentry simulate otmap --paper` draws it): on ten k-means
clients of a generated benchmark, fedmm-ot's map is closer to the known one than FedAdam's from 20 % of the rounds
on; and the command's flags and outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsentry.cli import main
from models.otmap.paper import figure


def test_fedmm_ot_below_fedadam_after_a_fifth_of_the_rounds() -> None:
    d = 8
    runs = {"fedmm-ot": ("fedmm-ot", {"hidden": 16, "lr": 0.1 / d, "batch": 256}),
            "fedadam": ("fedadam", {"hidden": 16, "server_lr": 0.01, "batch": 256})}
    out = figure(d, 10, 1.0, 1, 2, runs, per_client=200)
    ours, theirs = np.array(out["fedmm-ot"]), np.array(out["fedadam"])
    assert ours[0] == theirs[0]  # the same start, the same benchmark
    assert np.all(ours[1:] < theirs[1:]), (ours, theirs)
    assert ours[-1] < 0.3 * ours[0]  # it learned


def test_simulate_otmap_paper_writes_the_figure_and_checks(tmp_path) -> None:
    code = main(["simulate", "otmap", "--paper", "--dims", "4", "--rounds", "2", "--every", "1", "--hidden", "4",
                 "--out", str(tmp_path), "--json", str(tmp_path / "c.json")])
    assert code == 0
    result = json.loads((tmp_path / "c.json").read_text())
    assert set(result["curves"]["4"]) == {"fedmm-ot-0.1", "fedmm-ot-0.25", "fedmm-ot-0.5", "fedadam-0.003",
                                          "fedadam-0.01", "fedadam-0.03"}
    assert "below_after_20pct" in result["checks"]["4"]
    assert "| 4 |" in (tmp_path / "otmap-paper.md").read_text() and (tmp_path / "otmap-paper.png").is_file()


@pytest.mark.parametrize(("flags", "message"), [(["--dims", "16,x"], "--dims"), (["--share", "0"], "--share"),
                                               (["--paper", "--share", "0.5"], "--paper")])
def test_bad_flags_are_named(flags: list[str], message: str, capsys, tmp_path) -> None:
    small = ["--rounds", "1", "--hidden", "2", "--out", str(tmp_path)]  # were a check missing, the run stays short
    args = ["simulate", "otmap", *(["--paper", "--dims", "2"] if "--paper" not in flags else ["--dims", "2"]),
            *small, *(f for f in flags if f != "--paper")]
    code = main(args)
    assert code != 0
    assert message in capsys.readouterr().err
