"""A fourth job family written as a plug-in would be: the fleet's feature means, federated.

It exists to prove that a family is one package per side plus one registry line (issue 25, point 2): `model.py`
(the typed spec and the algorithm, the `models/` side), `runner.py` (the coordinator's), `participant.py` (the
agent's), `simulate.py` (its in-process simulation) and `FAMILY` below, which a test registers. No file of the
product names it."""

from models.families import JobFamily

FAMILY = JobFamily("fleetmean", "tests.plugin_family.model:MeanJobSpec", "tests.plugin_family.runner:MeanJob",
                   "tests.plugin_family.participant:MeanParticipant",
                   "the fleet's mean of named features (a test plug-in)",
                   simulator="tests.plugin_family.simulate:simulation")
