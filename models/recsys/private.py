"""Private mode for federated recommendation in the simulator: the server step receives only the sum of a round's
uploads (issue 23, point 2; docs/privacy.md says which aggregates are sums).

Every federated algorithm here aggregates a sum of per-device item rows: FedMAvg the changes W_i - V (divided by
the round's size, which the server knows), FedMC-ADMM the changes of rho W_i + Y_i and the devices joining each
item's count, AltGDMin the gradients, the item-bias sums and counts, and in its setup the power-iteration products
Y_i'(Y_i Z) and two counts. A plaintext upload is sparse: it names the items the device holds, which is itself what
its users rated. A summed upload cannot name them: each device lays its rows out over the whole catalogue (zero
where it holds nothing) with `held`, its 0/1 row of the items it holds (per-device flags such as FedMC-ADMM's `new`
become per-item rows the same way), and the secure sum (models.private.transport, the mixture's and PCA's) returns
one upload over the catalogue whose `item_mask` is where the summed `held` is positive. The server steps read it
as the upload of one device holding every item some device of the round holds: unchanged, fed the sum.

Clipping: each upload name has a kind (the algorithm's `summed`), and the job announces each kind's bound from
the most users a device holds (`most`, claimed as the mixture's record counts are) and `VALUE_BOUND`:
- flag (0/1 per item): 1; count (ratings of one item on one device): at most `most`;
- catalogue (a device's ratings): at most `most` times the catalogue;
- factor (a change of one item factor, FedMAvg): `VALUE_BOUND`;
- raters (a sum over the device's raters of one item, each term a residual times a factor: FedMC-ADMM's messages,
  AltGDMin's gradients and bias sums, the power products): `most` times `VALUE_BOUND`.
Each value is divided by its bound and clipped to [-1, 1] on the device (`clipped_values` counts what was clipped:
an honest device beyond the bound), and the ring (`Ring.for_sum`, 40 bits) takes as many fractional bits as a sum
of the round's devices leaves without wrapping.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.core.federated import State
from models.recsys.base import RecsysAlgorithm

#: the announced bound on a change of one item factor, and on one rater's term of a sum over raters (a residual of
#: the rating scale times a factor entry)
VALUE_BOUND = 64.0
#: the kinds of summed values and what bounds each, in units of `most` (the most users a device holds) and
#: VALUE_BOUND (models.recsys.private)
KINDS = ("flag", "count", "catalogue", "factor", "raters")
#: the row every summed upload adds: which items the device holds
HELD = "held"


def scales(alg: RecsysAlgorithm, most: int) -> dict[str, float]:
    """What each summed upload name is divided by before it is clipped to [-1, 1] (the module's bounds)."""
    unit = {"flag": 1.0, "count": float(most), "catalogue": float(most) * alg.n_items,
            "factor": VALUE_BOUND, "raters": float(most) * VALUE_BOUND}
    return {HELD: 1.0, **{k: unit[kind] for k, kind in alg.summed.items()}}


def round_shapes(alg: RecsysAlgorithm, setup: bool = False) -> dict[str, tuple[int, ...]]:
    """The shapes of one device's summable rows (`dense`) in a training round or a setup round, as a job over MQTT
    announces them: read off the algorithm's own step on a client of one rating (what the shapes do not depend on)."""
    from models.recsys.data import Ratings, client_data

    one = np.zeros(1, dtype=np.int64)
    data = client_data(Ratings(one, one, np.ones(1), np.arange(1), np.arange(alg.n_items), 0.0, 1.0),
                       [np.arange(1)], 0.5)[0]
    _, broadcast = alg.init_server(1, np.random.default_rng(0))
    state = alg.init_clients(data, broadcast)
    uploads = alg.client_setup(state, data, broadcast) if setup else alg.client_update(state, data, broadcast)[1]
    return {k: tuple(np.asarray(v).shape[1:]) for k, v in dense(alg, uploads).items()}


def dense(alg: RecsysAlgorithm, uploads: State) -> State:
    """A batch of plaintext uploads as each device's summable rows over the catalogue (on the device)."""
    items, mask = np.asarray(uploads["items"]), np.asarray(uploads["item_mask"], dtype=bool)
    b = len(items)
    rows = np.repeat(np.arange(b), items.shape[1])[mask.reshape(-1)]
    cols = items[mask]
    held = np.zeros((b, alg.n_items))
    held[rows, cols] = 1.0
    out: State = {HELD: held}
    for name in (k for k in alg.summed if k in uploads):  # a training round's or a setup round's
        v = np.asarray(uploads[name], dtype=float)
        if v.shape[:2] == items.shape:  # item rows
            full = np.zeros((b, alg.n_items, *v.shape[2:]))
            full[rows, cols] = v[mask]
        elif alg.summed[name] == "flag":  # a per-device flag on each item it holds
            full = held * v.reshape(b, 1)
        else:  # a per-device value
            full = v
        out[name] = full
    return out


def as_upload(total: State, n_items: int) -> State:
    """The decoded sum as one upload over the catalogue (leading axis 1), for the unchanged server step."""
    held = np.asarray(total[HELD], dtype=float).reshape(1, n_items)
    out = {k: np.asarray(v) for k, v in total.items() if k != HELD}
    return {**out, "items": np.arange(n_items)[None], "item_mask": held > 0.5}


class SummedRecsys:
    """The secure sum of a private recommendation job's uploads (a `models.core.rounds.Hooks.receive`): dense rows
    on the devices, the SecAgg+ transport, one upload back."""

    def __init__(self, alg: RecsysAlgorithm, most: int, dropout: float = 0.0, seed: int = 0, secure: bool = True):
        from models.private.transport import SecureTransport  # the `private` extra

        if not alg.summed:
            raise ValueError(f"{alg.name} has no summable uploads: it cannot run in private mode")
        self.alg = alg
        self.transport = SecureTransport(scales(alg, most), 1.0, dropout, seed, secure=secure)
        self.device_rounds = 0
        self.largest: dict[str, float] = {}  # per name, the largest |value| a device sent over its bound

    def __call__(self, ids: np.ndarray, uploads: State) -> State:
        rows = dense(self.alg, uploads)
        for k, v in rows.items():
            top = float(np.abs(v).max(initial=0.0)) / self.transport.scales[k]
            self.largest[k] = max(self.largest.get(k, 0.0), top)
        total = self.transport(ids, rows)
        self.device_rounds += len(ids)
        return as_upload(total, self.alg.n_items)

    def report(self) -> dict[str, Any]:
        t = self.transport
        sent = sum(t.steps.values())
        return {"upload_bytes_per_device_round": sent / max(self.device_rounds, 1),
                "upload_bytes_by_step": t.per_step(max(self.device_rounds, 1)),
                "secure_sum": {"device_cpu_seconds_max": float(max(t.device_cpu, default=0.0)),
                               "coordinator_cpu_seconds_median": float(np.median(t.server_cpu)) if t.server_cpu
                               else 0.0, "dropout": t.dropout, "clipped_values": t.clipped, "sums": t.sums,
                               "failed_sums": t.failures,
                               "largest_of_bound": {k: round(v, 6) for k, v in sorted(self.largest.items())}}}
