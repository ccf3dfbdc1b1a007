"""Why `inflate` moved the mixture where `compliant` did not (issue 22; docs/robustness.md has the figures): two
compliant rogues of 21 on synthetic, once claiming their true record counts and once the most admitted. Claiming
more changes one number, the capped weight, which enters the standardisation, the training rounds' weights and
the threshold's. This runs the inflate fleet with each of those taken from the inflate run or the compliant one,
and prints AUC and caught:

    nice -n 10 python benchmarks/inflate_paths.py [std,train,thr | none] [--seed N] [--mass-cap C]

`std,train,thr` is the inflate run itself, `none` the compliant one. --mass-cap replaces FedEM's default."""

from __future__ import annotations

import argparse
import dataclasses

from fedsentry.cli import main
from models.detection.attacks import Adversaries
from models.mixture import simulator as mixture_simulator
from models.mixture.fedem import FedEM
from models.pca import simulator as pca_simulator

PATHS = ("std", "train", "thr")


def run(taken: set[str], seed: int, mass_cap: float | None) -> None:
    prepare = pca_simulator.prepare_clients

    def hybrid(parts, names, guard, adversaries):  # type: ignore[no-untyped-def]
        inflated = prepare(parts, names, guard=guard, adversaries=adversaries)
        compliant = prepare(parts, names, guard=guard, adversaries=Adversaries(adversaries.count, "compliant"))
        base = inflated if "std" in taken else compliant
        train = inflated if "train" in taken else compliant
        threshold = inflated if "thr" in taken else compliant
        return dataclasses.replace(base, caps=train.caps, claimed=train.claimed, weight=threshold.weight)

    mixture_simulator.prepare_clients = hybrid  # type: ignore[assignment]
    if mass_cap is not None:
        init = FedEM.__init__

        def with_cap(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            init(self, *args, **{**kwargs, "mass_cap": mass_cap})

        FedEM.__init__ = with_cap  # type: ignore[method-assign]
    main(["simulate", "pca", "--detector", "gmm", "--dataset", "synthetic", "--clients", "21", "--adversaries", "2",
          "--attack", "inflate", "--rounds", "60", "--fraction", "0.1", "--seed", str(seed)])


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("taken", help="what comes from the inflate run: a comma list of std, train, thr, or none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mass-cap", type=float, default=None)
    a = p.parse_args()
    taken = set() if a.taken == "none" else set(a.taken.split(","))
    if not taken <= set(PATHS):
        p.error(f"taken: {a.taken!r} names something other than {', '.join(PATHS)} (or none)")
    run(taken, a.seed, a.mass_cap)
