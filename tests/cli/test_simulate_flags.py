"""`fedsentry simulate`'s family flags are generated from the families' typed specs (issue 25, point 2), by the
generator of `job create`'s: each setting a family's simulator takes is a flag with the spec's words and the
simulator's default, each algorithm parameter it names a flag with its words and each algorithm's default, a bad
value is refused naming the flag, and a family without a simulator gets none."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import ClassVar

import pytest

from fedsentry.cli import build_parser, main
from fedsentry.cli.simulate_flags import add_simulate_flags
from fedsentry.cli.spec_flags import _shown
from models.families import FAMILIES, JobFamily, family, register, simulated, unregister
from models.jobspec import SIMULATION_DEFAULTS, Simulation
from models.params import parameters
from tests.cli.test_help import commands
from tests.plugin_family import FAMILY as PLUGIN
from tests.plugin_family.model import MeanJobSpec

COMMANDS = {"fedsentry simulate pca": simulated("records"), "fedsentry simulate recsys": simulated("ratings")}


def options(path: str) -> dict[str, argparse.Action]:
    parser = dict(commands(build_parser()))[path]
    return {o: a for a in parser._actions for o in a.option_strings}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_each_setting_a_simulator_takes_is_a_flag_with_its_words_and_default(path):
    flags = options(path)
    for name in COMMANDS[path]:
        for s in family(name).spec.simulated():
            a = flags[flag(s.name)]
            assert s.help in a.help, (name, s.name, a.help)
            if s.default is not None:
                shown = _shown(s.default)  # as the generator writes it (a boolean in lower case)
                # one default, or each owner's: "0.99 for dict, pca" names every family that shares it
                owned = re.search(rf"{re.escape(shown)} for [^;)]*\b{re.escape(name)}\b", a.help)
                assert f"default {shown}" in a.help or owned, (s.name, a.help)
            if s.choices:
                assert set(s.choices) <= set(a.choices), s.name


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_each_named_algorithm_parameter_is_a_flag_with_each_algorithms_default(path):
    flags = options(path)
    for name in COMMANDS[path]:
        spec = family(name).spec
        assert spec.simulation is not None
        for algorithm, s in spec.simulated_parameters():
            a = flags[flag(s.name)]
            assert s.help in a.help and a.default is None, (s.name, a.help)  # None: the algorithm's own default
            assert s.name in parameters(spec.algorithms[algorithm])
            if s.default is not None:
                shown = str(s.default).lower() if isinstance(s.default, bool) else str(s.default)
                assert f"default {shown}" in a.help or f"{shown} for {algorithm}" in a.help, (s.name, a.help)


def test_simulate_defaults_differ_from_a_jobs_in_one_place():
    sim, job = options("fedsentry simulate pca"), options("fedsentry job create")
    for name, value in SIMULATION_DEFAULTS.items():
        assert f"(default {value})" in sim[flag(name)].help, sim[flag(name)].help
        assert f"default {value}" not in job[flag(name)].help, job[flag(name)].help
    args = build_parser().parse_args(["simulate", "pca"])
    assert (args.rounds, args.fraction, args.rank, args.holdout, args.kernel) == (100, 0.1, 3, 0.2, "none")
    assert args.algorithm is None and args.quantile is None  # per family: resolved when the family is known
    # a job's pca default is fedmm
    assert "default fedem for gmm; fedmm-dl for dict; fedpg for pca" in sim["--algorithm"].help
    recsys = build_parser().parse_args(["simulate", "recsys"])
    assert (recsys.rounds, recsys.fraction, recsys.rank, recsys.algorithm) == (100, 0.1, 10, "fedmc-admm")
    demo = build_parser().parse_args(["demo"])  # the demo runs a job: the job's defaults
    assert (demo.rounds, demo.fraction) == (30, 0.3)


@pytest.mark.parametrize(("argv", "message"), [
    (["simulate", "pca", "--quantile", "1.5"], "--quantile: must be in (0, 1)"),
    (["simulate", "pca", "--rounds", "0"], "--rounds: must be between 1 and 100000"),
    (["simulate", "pca", "--detector", "pca", "--kernel-features", "3"], "--kernel-features: must be between"),
    (["simulate", "pca", "--detector", "pca", "--kernel", "rff", "--rank", "2000"], "--rank: (2000) must be smaller "
     "than kernel_features (1000)"),
    (["simulate", "pca", "--seed", "-1"], "--seed: must be in [0, 2^31)"),
    (["simulate", "pca", "--ridges", "0.1,wide"], "--ridges: expected a number, got 'wide'"),
    (["simulate", "pca", "--ridges", "0.1,20"], "--ridges: ridges must be at most 3 further ridges, each in (0, 10]"),
    (["simulate", "pca", "--kernel", "poly"], "argument --kernel: invalid choice: 'poly'"),
    (["simulate", "pca", "--bits", "1", "--detector", "pca", "--algorithm", "fedmm", "--clients", "5"],
     "--bits: bits must be between 2 and 16"),
    (["simulate", "pca", "--rho", "2"], "--rho is a parameter of fedpe: it applies to --detector pca"),
    (["simulate", "recsys", "--rank", "0"], "--rank: must be at least 1"),
    (["simulate", "recsys", "--fraction", "2"], "--fraction: must be in (0, 1]"),
    (["simulate", "recsys", "--user-solver", "newton"], "argument --user-solver: invalid choice: 'newton'"),
])
def test_a_bad_value_is_refused_naming_its_flag(argv, message, capsys):
    assert main([*argv, "--dataset", "synthetic"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@dataclass
class SimulatedMean(MeanJobSpec):
    """The plug-in's spec with a simulator declared: its flags come with nothing else written."""

    simulation: ClassVar = Simulation(settings=("rounds", "features"), algorithms=("fedmean",),
                                      parameters={"shrink": "shrink the mean towards zero by this share"},
                                      defaults={"rounds": 7})


def test_a_family_without_a_simulator_gets_none_and_one_with_gets_its_flags():
    register(PLUGIN)
    try:
        assert PLUGIN.name not in simulated(PLUGIN.data) and PLUGIN.name in FAMILIES
        simulate = dict(commands(build_parser()))["fedsentry simulate"]
        assert set(simulate._subparsers._group_actions[0].choices) == {"pca", "recsys", "dict", "otmap"}  # --paper
        assert PLUGIN.name not in options("fedsentry simulate pca")["--detector"].choices
    finally:
        unregister(PLUGIN.name)
    name = "meansim"
    register(JobFamily(name, f"{__name__}:SimulatedMean", PLUGIN.runner, PLUGIN.participant))
    try:
        assert name in simulated(PLUGIN.data)
        p = argparse.ArgumentParser()
        add_simulate_flags(p, [name])
        flags = {o: a for a in p._actions for o in a.option_strings}
        assert flags["--rounds"].default == 7 and flags["--rounds"].help == "averaging rounds (default 7)"
        assert "--fraction" not in flags and "--rank" not in flags  # what its simulator does not take
        assert "numeric features to average" in flags["--features"].help
        assert flags["--shrink"].help == "shrink the mean towards zero by this share (default 0.0)"
        assert flags["--algorithm"].choices == ["fedmean"]
        assert p.parse_args(["--shrink", "0.5"]).shrink == 0.5
    finally:
        unregister(name)
