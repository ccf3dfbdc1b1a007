"""The usual robust aggregator, as an anchor to measure the support rule against (`fedsentry bench robustness`):
FedEM whose server takes, instead of the weighted sum of every device's last statistics, their coordinate-wise
trimmed mean (models.core.aggregation.trimmed_weighted_mean: per entry, the devices' shares of each statistic with
the most extreme devices on either side left out), with every component shared (no support rule). The M-step
repairs what the trimmed mean leaves indefinite (models.mixture.gmm.nearest_psd). Not a job's algorithm: it
bounds each device's influence on every number, but does not ask whether enough devices support a component.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.core.aggregation import trimmed_weighted_mean
from models.core.federated import State
from models.mixture.fedem import FedEM
from models.mixture.gmm import Mixture, m_step


class TrimmedFedEM(FedEM):
    name = "fedem-trimmed"

    def __init__(self, n_features: int, trim: float = 0.1, **params: Any):
        super().__init__(n_features, **{**params, "min_support": 0})
        if not 0 <= trim < 0.5:
            raise ValueError("trim must be in [0, 0.5)")
        self.trim = float(trim)

    def aggregate(self, server: State) -> Mixture:
        n = int(server["rows"])
        mass = server["R_rows"][:n].sum(axis=1).astype(float)  # each row: a device's statistics per record
        w = server["W_rows"][:n] * mass
        keep = w > 0
        per = np.maximum(mass[keep], 1e-300)
        share = w[keep]
        stats = [server[f"{k}_rows"][:n][keep].astype(float) / per.reshape(-1, *([1] * (server[f"{k}_rows"].ndim - 1)))
                 for k in ("R", "S1", "S2")]
        R, S1, S2 = (trimmed_weighted_mean(s.reshape(len(s), -1), share, self.trim).reshape(s.shape[1:])
                     for s in stats)
        return m_step(np.maximum(R, 0.0), S1, S2, self.reg)


#: anchors by name (simulate_mixture's `algorithm`)
ANCHORS = {TrimmedFedEM.name: TrimmedFedEM}
