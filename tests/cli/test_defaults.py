"""One default detector and one source for every default (issues 21 and 28): `--help` of every entry point,
the OpenAPI schema and the README's table show the values the typed settings and the algorithm define."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api.job_body import family_body, parse_job
from fedsentry.cli import build_parser
from models.families import DEFAULT_DETECTOR, algorithm_default, family, spec_default
from tests.cli.test_help import commands

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def parser_of(path: str):
    return dict(commands(build_parser()))[path]


def action(path: str, option: str):
    return next(a for a in parser_of(path)._actions if option in a.option_strings)


def readme_default(setting: str) -> str:
    """The value the README's table of defaults gives for a setting (matched by its name in backquotes)."""
    start = README.index("## The default detector")
    table = README[start: README.index("\n## ", start)]
    row = next(line for line in table.splitlines() if line.startswith("|") and f"`{setting}`" in line)
    return row.strip("|").split("|")[-1].strip()


GMM = {"quantile": spec_default("gmm", "quantile"), "holdout": spec_default("gmm", "holdout"),
       "rounds": spec_default("gmm", "rounds"), "fraction": spec_default("gmm", "fraction"),
       "reg": algorithm_default("gmm", "reg")}


def test_gmm_is_the_default_detector_of_every_entry_point():
    assert DEFAULT_DETECTOR == "gmm"
    assert "default gmm" in action("fedsentry job create", "--type").help
    assert "--detector" in action("fedsentry job create", "--type").option_strings
    for path in ("fedsentry simulate pca", "fedsentry bench pca", "fedsentry demo"):
        assert "(default gmm" in action(path, "--detector").help, path
    from fedsentry.cli.pca import resolve_detector

    for algorithm, detector in ((None, "gmm"), ("centralized", "gmm"), ("fedem", "gmm"), ("fedpg", "pca"),
                                ("local", "pca")):
        args = build_parser().parse_args(["simulate", "pca", *(["--algorithm", algorithm] if algorithm else [])])
        resolve_detector(args)
        assert args.detector == detector, algorithm
    assert parse_job({"features": ["a", "b"]}).spec().family == "gmm"  # a body naming no family
    assert parse_job({"features": ["a", "b", "c", "d"], "algorithm": "fedpg"}).type == "pca"  # the algorithm's
    assert readme_default("--detector") == "gmm"
    assert readme_default('"type"') == "gmm"
    assert family("gmm").spec.default_algorithm() == "fedem" and "| algorithm | fedem |" in README


@pytest.mark.parametrize("setting", sorted(GMM))
def test_each_default_is_the_same_in_help_openapi_and_readme(setting):
    value = GMM[setting]
    shown = f"default {value}"
    props = family_body(family("gmm")).model_json_schema()["properties"]
    openapi = props["algorithm_params" if setting == "reg" else setting]["description"]
    assert shown in openapi, (setting, openapi)
    create = action("fedsentry job create", "--param" if setting == "reg" else f"--{setting}").help
    assert shown in create, (setting, create)
    if setting in ("quantile", "holdout", "reg"):
        sim = action("fedsentry simulate pca", f"--{setting}").help
        assert shown in sim or f"default {value} for gmm" in sim, (setting, sim)
    assert readme_default(setting) == str(value), setting


def test_the_pooled_detector_has_the_federated_defaults():
    from models.mixture.detector import MixtureDetector

    det = MixtureDetector()
    assert det.reg == GMM["reg"] and det.quantile == GMM["quantile"]


def test_no_help_text_states_a_gmm_default_the_code_does_not_have():
    """Old numbers (quantile 0.99 or 0.98, ridge 1e-3) must not come back as gmm defaults in any help text (other
    parameters may have such defaults: FedEM's tolerance is 0.001)."""
    wrong = []
    for path, parser in commands(build_parser()):
        for a in parser._actions:
            text = a.help or ""
            if re.search(r"gmm[^;)]*\b(quantile|reg|ridge)\b[^;,)]*default (0\.98\b|0\.99\b|0\.001\b|1e-3)", text):
                wrong.append((path, a.option_strings, text))
    assert not wrong, wrong
