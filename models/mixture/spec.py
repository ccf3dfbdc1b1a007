"""The settings of a federated Gaussian-mixture job (components and ridge are the algorithm's
parameters: ``algorithm_params.components``, ``algorithm_params.reg``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from models.detection.spec import DetectorJobSpec
from models.jobspec import Simulation, check, setting
from models.mixture import ALGORITHMS, FEDERATED
from models.params import coerce

#: the algorithm parameter of a private job whose secure sums carry the support rows' bit proofs (models.private.proven)
SUPPORT_PROOFS = "support_proofs"


@dataclass
class MixtureJobSpec(DetectorJobSpec):
    algorithms: ClassVar = FEDERATED
    family: ClassVar[str] = "gmm"

    #: share of each device's records held out of training; the threshold is read from their scores
    holdout: float = setting(0.2, help="share of each device's records held out of training; the threshold is read "
                             "from their scores")
    # held-out scores promise what they flag, so the mixture affords a lower quantile than PCA's training
    # errors; the colluders' exceedance curves are left out at the top and clipped at each side
    # (models.detection.screening.exceedance_threshold)
    quantile: float = setting(0.985, help="threshold quantile of held-out normal scores")
    device_trim: float = setting(0.01, help="share of the devices' exceedance curves clipped at each side")

    #: the mixture's size follows its components (an algorithm parameter)
    sizing = "algorithm_params"

    simulation: ClassVar = Simulation(
        settings=("rounds", "fraction", "seed", "quantile", "holdout", "private", "dp_epsilon", "dp_delta"),
        algorithms=ALGORITHMS,
        parameters={"components": "mixture components (none: the most of 128, 64, 32, ... whose uploads fit 256 KiB "
                    "per device and round)",
                    "reg": "ridge added to every covariance, in standardised units",
                    "hard_rounds": "k-means rounds after seeding before EM rounds (at least the job's rounds: "
                    "k-means rounds throughout)",
                    "seeding": "how the seeding round merges the devices' own clusters into the first mixture: merge "
                    "(k-means on their means, k-FED) or split (splitting the most spread group, from their summed "
                    "statistics), or grow (no device's clusters: grown from the fleet's sums over several seeding "
                    "rounds, as private mode seeds)",
                    "ridges": "further ridges (comma-separated): the server also takes the M-step of the same "
                    "statistics at each, and a record scores by its smallest tail probability across the mixtures "
                    "(models.mixture.ridges)",
                    "component_ridges": "candidate ridges (comma-separated): each component keeps the one under which "
                    "the fleet's held-out records in it are likeliest (models.mixture.component_ridges)",
                    "ridge_criterion": "how each component chooses among --component-ridges: likelihood (of its "
                    "held-out records) or volume (the least that holds the threshold quantile of them)",
                    "anneal": "deterministic annealing in the k-means rounds: the first temperature (standardised "
                    "units), each round's 0.9 times the last's, k-means below 0.001 (0: none)",
                    "scoring": "how a record's score reads the mixture: mixture (its density), component (its best "
                    "single component's, weight-free) or both (the smaller tail probability of the two; "
                    "models.mixture.fedem.SCORINGS)",
                    "component_tails": "none, own (score a record by its tail probability among the fleet's "
                    "held-out records in its own component: per-component histograms, shrunk toward the fleet's) or "
                    "both (the smaller tail probability of that and the fleet's; models.mixture.component_tails)",
                    "coarse": "also score by the fleet's mixture merged into components / coarse (moment-matched; "
                    "the smaller tail probability of the two; models.mixture.coarse; 0: none)",
                    "splits": "swaps in the k-means rounds, one every 5 rounds: the broadest component splits in "
                    "two and the two components cheapest to merge become one (models.mixture.swaps; none: as many "
                    "as end 1/fraction rounds before the job's last; 0: none)",
                    "mass_share": "how the support rule reads the share of a component's mass its heaviest devices "
                    "hold: exact (each device's, from the server's table) or bound (from sums of masses and squared "
                    "masses, as private mode must)",
                    "seed_rows": "keep each device's seeding clusters as its first control-variate row (README)",
                    "min_support": "devices that must support a component for it to join the fleet's model; the "
                    "others stay personal (at most half a small fleet; 0 turns the rule off)"})

    def problem(self) -> dict[str, Any]:
        # the job's rounds and share sampled bound the swaps (models.mixture.swaps.last_swap)
        return {"n_features": len(self.features), "rounds": self.rounds, "fraction": self.fraction}

    def validate(self) -> None:
        """As every detector job's, with `support_proofs` (algorithm_params) checked here: a setting of the private
        job's secure sums (models.private.proven), not of the algorithm's fit; the summed FedEM carries it."""
        given = SUPPORT_PROOFS in self.algorithm_params
        proofs = self.algorithm_params.pop(SUPPORT_PROOFS, False)
        try:
            super().validate()
        finally:
            if given:
                self.algorithm_params[SUPPORT_PROOFS] = proofs
        if given:
            self.algorithm_params[SUPPORT_PROOFS] = proofs = coerce(f"algorithm_params.{SUPPORT_PROOFS}", proofs,
                                                                   bool)
            check(not proofs or (self.private and self.dp_epsilon is None), f"algorithm_params.{SUPPORT_PROOFS}",
                  "support proofs check private mode's masked support rows: set private, without dp_epsilon (noise "
                  "in the rows cannot match their commitments)")

    def check_family(self) -> None:
        super().check_family()
        # several ridges need a threshold phase per mixture, which the coordinator does not run yet
        check(not self.algorithm_params.get("ridges"), "algorithm_params.ridges", "several ridges run in the "
              "simulator only so far (fedsentry simulate --ridges); a job trains one ridge (reg)")
        check(not self.algorithm_params.get("component_ridges"), "algorithm_params.component_ridges", "a ridge per "
              "component runs in the simulator only so far (fedsentry simulate --component-ridges)")
        check(self.algorithm_params.get("seeding") != "grow" or self.private, "algorithm_params.seeding", "grow "
              "(several seeding rounds of every device) runs in the simulator only in plaintext (fedsentry simulate "
              "--seeding grow); a private job grows its mixture so anyway")
        check(not self.algorithm_params.get("anneal"), "algorithm_params.anneal", "annealing runs in the simulator "
              "only so far (fedsentry simulate --anneal; measured, not adopted: benchmarks/results/detector-ideas.md)")
        check(self.algorithm_params.get("scoring", "mixture") == "mixture", "algorithm_params.scoring", "scoring "
              "other than by the mixture's density runs in the simulator only so far (fedsentry simulate --scoring; "
              "measured: benchmarks/results/detector-ideas-2.md)")
        check(self.algorithm_params.get("component_tails", "none") == "none", "algorithm_params.component_tails", "the "
              "components' own tails run in the simulator only so far (fedsentry simulate --component-tails; "
              "measured: benchmarks/results/detector-ideas-2.md)")
        check(not self.algorithm_params.get("coarse"), "algorithm_params.coarse", "a coarse mixture runs in the "
              "simulator only so far (fedsentry simulate --coarse; measured: benchmarks/results/detector-ideas-2.md)")
        check(0.05 <= self.holdout <= 0.5, "holdout", "must be in [0.05, 0.5] (the share of each device's records "
              "its threshold is read from)")
