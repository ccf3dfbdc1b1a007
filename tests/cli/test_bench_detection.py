"""`fedsentry bench detection` (issue 21, point 6): the README's detection table comes from the default
detector exactly as `simulate pca` runs it, and the command rewrites only the block between the markers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def fedsentry(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedsentry.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_the_table_is_simulates_default_runs_and_lands_between_the_readme_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- detection-table -->\nstale figures\n<!-- /detection-table -->\noutro\n")
    out = fedsentry("bench", "detection", "--datasets", "synthetic", "--partitions", "noniid", "--seeds", "1",
                    "--out", str(tmp_path), "--readme", str(readme), "--json", "-", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    bench = json.loads(out.stdout)
    sim = json.loads(fedsentry("simulate", "pca", "--dataset", "synthetic", "--partition", "noniid", "--seed", "0",
                               "--json", "-", cwd=tmp_path).stdout)
    run = bench["runs"][0]
    assert (run["auc_roc"], run["recall"], run["false_positive_rate"]) == (sim["auc_roc"], sim["recall"],
                                                                          sim["false_positive_rate"])
    assert run["devices"] == sim["device_false_positive_rate"]
    text = readme.read_text()
    assert "stale figures" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    assert f"| synthetic | 1 | {sim['auc_roc']:.4f} " in text and "fedsentry bench detection" in text
    assert "Each run" in (tmp_path / "detection.md").read_text()


def test_a_readme_without_markers_is_refused_and_left_alone(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    out = fedsentry("bench", "detection", "--datasets", "synthetic", "--partitions", "iid", "--seeds", "1", "--out",
                    str(tmp_path), "--readme", str(readme), cwd=tmp_path)
    assert out.returncode == 2 and "markers" in out.stderr and readme.read_text() == "no markers here\n"
    out = fedsentry("bench", "detection", "--simulate", "--min-support 6", "--readme", str(readme), cwd=tmp_path)
    assert out.returncode == 2 and "--readme takes the defaults" in out.stderr
    for bad, says in (("--bogus 3", "unrecognized arguments: --bogus"), ("--reg '1", "No closing quotation")):
        out = fedsentry("bench", "detection", "--simulate", bad, "--out", str(tmp_path), cwd=tmp_path)
        assert out.returncode == 2 and f"--simulate {bad!r}" in out.stderr and says in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


def test_the_project_readme_holds_a_generated_table():
    start, end = README.index("<!-- detection-table -->"), README.index("<!-- /detection-table -->")
    block = README[start:end]
    assert "fedsentry bench detection" in block and "| synthetic |" in block
