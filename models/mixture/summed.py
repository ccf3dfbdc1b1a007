"""FedEM for private mode: the coordinator learns only the sum of a round's uploads (issue 23).

FedEM's server keeps every device's last statistics (its control variate, models.mixture.control) to replace them
when the device answers again; under secure aggregation it sees no device's statistics, only their sum. The control
variates move to the devices, as in seed 003's Alg. 2 (V_i on the client): each device keeps the contribution it
last made, W_i T_i (its capped weight times its per-record statistics), and uploads the difference to its new one.
The sum of a round's differences is what the aggregate changes by, so the server's running sums equal FedEM's
table sums exactly, and its memory no longer grows with the fleet (K statistics, not one row per device).

What each upload carries (all summable, nothing that names the device):
- dR, dS1, dS2: the change of W_i (R, S1, S2) per record (models.mixture.gmm packing);
- dH: the change of its 0/1 support row (it holds SUPPORT_SHARE of its records in the component), so that the
  server counts supporters from the sum (the support rule's count); with the support proofs (models.private.proven)
  each device also proves its row holds 0s and 1s, and a sum that does not match the commitments is withheld
  (WITHHELD: no support count moves, the sum's devices keep their rows);
- dQ: the change of its squared weighted mass per component ((W_i R_i)^2), while the mass share is on: the rule
  needs each device's mass, and the server bounds the heaviest devices' share from the sums (`mass_shares`);
- dN: 1 the first time the device contributes, 0 after (how many devices the counts cover).

The device computes its own capped weight from its record count and the caps the statistics phase fixed (which the
broadcast carries): the pipeline's cap stage moves to the device, as the upload checks do (each device clips its
values to the bound the job announces, models.private.transport); the coordinator can check neither.

Seeding without anyone's clusters: k-FED (FedEM's seeding) merges every device's own cluster centres, which a
coordinator that sees only sums cannot do, and a centre of a handful of records is close to a raw flow. Here the
server grows the mixture from sums alone (LBG, Linde, Buzo and Gray 1980): every device answers each seeding round
with the statistics of a hard assignment of its records to the broadcast centres and its records per centre; the
server moves each centre to its records' mean, drops centres fewer than `least_records` of the fleet's records
chose (min_cluster, and d + 1 for a covariance of full rank: their records go to other centres), and splits every
centre whose halves can keep that many in two along its principal axis (+- half its standard deviation there)
until it has `split_factor` x K of them (by default K; more are merged into K by weighted k-means on their sums,
as k-FED merges clusters, which measured no better: docs/privacy.md), and refines once. About log2(K
split_factor) + 2 rounds of every device, whose uploads grow with the live centres; each seeding upload summarises
whatever records fell to a centre, summed over the devices.

Swaps (models.mixture.swaps), as plaintext FedEM makes them: the same rule decides them (`swaps.plan` reads only
the aggregated statistics, which these sums are). The merge of b into a is made in the running sums and listed in
every broadcast after (`merges`); each device makes the merges it has not made yet in its own contribution (its
control variate: R, S1, S2 and its support row) before computing its next difference (`merged`), so that the sums
stay exactly the sum of the devices' contributions. No upload grows. What differs from plaintext's table: a device's
support row is merged by the same column addition, so until the device answers again the count of the merged
component counts it once per component merged in (plaintext recounts the merged row at once: a device supporting
both counts once).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from models.core.federated import State, SupportView
from models.core.pipeline import CAP_LEVEL, CAP_SCALE, cap_weights, support_mask
from models.mixture import growing
from models.mixture.control import SUPPORT_SHARE
from models.mixture.fedem import FedEM, broadcast_of, mixture_of
from models.mixture.gmm import Mixture, hard_stats, m_step, nearest
from models.mixture.growing import GROW
from models.mixture.heaviest import mass_shares
from models.mixture.splitting import MAX_SPLITS, least_records
from models.mixture.swaps import hold_empty, merge_columns, plan, split_in_broadcast, swap_due
from models.private.dp import clip_rows

#: statistics a device uploads, in this order (dN: its first contribution)
DELTAS = ("dR", "dS1", "dS2", "dH", "dN")  # (a seeding round's also carries "dC", its records per centre)
#: every upload name, as differential privacy's clips travel in the broadcast
DP_NAMES = (*DELTAS, "dC")
#: the change of a device's squared weighted mass per component, uploaded while the support rule's mass share is on
#: (`mass_shares`; not with differential privacy)
SQUARES = "dQ"
#: a sum's marker that its support rows' changes were withheld (models.private.proven: the sum did not match the
#: devices' commitments), and the row each device keeps for that case
WITHHELD, WITHHELD_ROW = "dH.withheld", "H.kept"


class SummedFedEM(FedEM):
    """FedEM whose server step needs only the sum of the round's uploads (see the module)."""

    name = "fedem"
    summed: ClassVar[bool] = True

    def __init__(self, n_features: int, split_factor: int = 1, support_proofs: bool = False, **params: object):
        super().__init__(n_features, **params)  # type: ignore[arg-type]
        #: a private job's support rows proven 0/1 in its secure sums (models.private.proven; the job's setting)
        self.support_proofs = bool(support_proofs)
        if not 1 <= split_factor <= 16:
            raise ValueError("split_factor must be between 1 and 16 (seeding centres per component before merging)")
        self.split_factor = int(split_factor)
        #: differential privacy: the least summed weight a component or seeding centre needs (above the noise), and
        #: the L2 clip of each upload name (`dp_clips`), which the broadcast announces to the devices
        self.mass_floor = 0.0
        self.dp_clips: dict[str, float] = {}
        #: seeding rounds that may split (MAX_SPLITS; differential privacy plans for fewer: each costs budget)
        self.max_splits = MAX_SPLITS

    # -- start -----------------------------------------------------------------------------------------
    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        K, d, p = self.components, self.n_features, self.packed
        server: State = {"stage": np.array(GROW), "em_round": np.zeros((), dtype=np.int64),
                         "seed": np.array(rng.integers(2**31)), "refined": np.zeros((), dtype=np.int64),
                         "R": np.zeros(K), "S1": np.zeros((K, d)), "S2": np.zeros((K, p)), "support": np.zeros(K),
                         "devices": np.zeros(()), "rejected": np.zeros(())}
        return server, self.grow_broadcast(np.zeros((1, d)))

    def grow_broadcast(self, centres: np.ndarray, before: int = 1) -> State:
        """A seeding round's broadcast (models.mixture.growing.grow_broadcast), split_factor x K slots."""
        return growing.grow_broadcast(max(self.components * self.split_factor, 1), centres, before)

    def init_clients(self, data: State, broadcast: State) -> State:
        n, K, d, p = len(data["X"]), self.components, self.n_features, self.packed
        slots = K * self.split_factor
        return {"nll": np.zeros(n), "R": np.zeros((n, slots)), "S1": np.zeros((n, slots, d)),
                "S2": np.zeros((n, slots, p)), "H": np.zeros((n, slots)), "joined": np.zeros(n), "merged": np.zeros(n),
                "Q": np.zeros((n, slots)), WITHHELD_ROW: np.zeros((n, slots))}

    # -- device ----------------------------------------------------------------------------------------
    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        """Each device's new contribution W_i T_i and the difference to its last (its control variate)."""
        stage = int(broadcast["stage"])
        K, slots = self.components, len(state["R"][0])
        state, merges = merged(state, broadcast)
        state = {**state, "Q": state.get("Q", np.zeros_like(state["R"]))}  # (a device's state from before it)
        new = {k: np.zeros_like(state[k]) for k in ("R", "S1", "S2", "H", "Q")}
        nll = np.zeros(len(data["X"]))
        counts = np.zeros((len(data["X"]), slots))  # a seeding round's records per centre (not weighed)
        for b, X in enumerate(data["X"]):
            n = max(len(X), 1)
            w = self.own_weight(float(data["claimed"][b]), broadcast)
            if stage == GROW:
                live = np.flatnonzero(np.asarray(broadcast["live"]) > 0)
                R, S1, S2 = hard_stats(X, live[nearest(X, broadcast["centres"][live])], slots)
                counts[b] = R
            else:
                R, S1, S2, ll = self.round_statistics(X, mixture_of(broadcast), stage)
                nll[b] = -ll / n
                R, S1, S2 = _pad(R, slots), _pad(S1, slots), _pad(S2, slots)
            new["R"][b], new["S1"][b], new["S2"][b] = w * R / n, w * S1 / n, w * S2 / n
            new["H"][b] = (R / n >= SUPPORT_SHARE).astype(float) if len(X) else 0.0
            new["Q"][b] = new["R"][b] ** 2
        # what changed: a seeding round's live slots and the last one's (every device's span is the broadcast's),
        # after seeding the first K
        upto = int(broadcast["span"]) if stage == GROW else K
        up = {f"d{k}": (new[k] - state[k])[:, :upto] for k in ("R", "S1", "S2", "H")}
        up["dN"] = 1.0 - state["joined"]
        if self.squares:  # the support rule's mass share: the change of its squared mass (`mass_shares`)
            up[SQUARES] = (new["Q"] - state["Q"])[:, :upto]
        if stage == GROW:  # the seeding's records per centre, this round's (not a change: every device answers)
            up["dC"] = counts[:, :upto]
        if "dp.clip" in broadcast:  # differential privacy: each change clipped, what is left carried to the next
            clips = self.announced_clips(broadcast)
            up = {k: clip_rows(v, clips[k])[0] for k, v in up.items()}
            for k in ("R", "S1", "S2", "H"):
                new[k][:, :upto] = state[k][:, :upto] + up[f"d{k}"]
        after = {**new, "nll": nll, "joined": np.ones(len(data["X"])), "merged": np.full(len(data["X"]), merges)}
        if WITHHELD_ROW in state:  # the row the sums hold if this change is withheld (a state from init_clients)
            after[WITHHELD_ROW] = np.array(state["H"], dtype=float)
        return after, up

    @staticmethod
    def own_weight(claimed: float, broadcast: State) -> float:
        """The device's capped weight, from its own record count and the caps the broadcast carries (the pipeline's
        cap stage, on the device: its claim is never seen)."""
        if "cap" not in broadcast:
            return claimed
        level, scale = (float(v) for v in broadcast["cap"])
        return float(cap_weights(np.array(claimed), level, scale))

    # -- server ----------------------------------------------------------------------------------------
    def screen(self, server: State, client_ids: np.ndarray, uploads: State) -> np.ndarray | None:
        """Nothing to check: the coordinator sees only the round's sum."""
        return None

    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        """The sum of the round's uploads (`summed_update`). A sum whose support rows failed their check against the
        devices' commitments (models.private.proven: WITHHELD) moved no support count: it is counted in the server
        state (`withheld`, the round's influence record) and the broadcast tells the round's devices to keep their
        support row as it was (`client_finish`)."""
        withheld = WITHHELD in uploads
        if withheld:
            server["withheld"] = server.get("withheld", np.zeros(())) + 1
        server, broadcast = self.summed_update(server, client_ids, uploads, weight)
        return server, ({**broadcast, WITHHELD: np.ones(1)} if withheld else broadcast)

    def summed_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        """The sum of the round's uploads (one row: what the secure sum yields; several rows are summed here, as
        the plaintext simulation sends them) moves the running sums; then a seeding step or the M-step."""
        if len(client_ids) == 0 or not all(k in uploads for k in DELTAS):
            return server, self.current(server)
        total = {k: np.asarray(uploads[k], dtype=float).sum(axis=0) for k in DELTAS}
        K = self.components
        stats = [total["dR"], total["dS1"], total["dS2"]]
        server["devices"] = server["devices"] + float(total["dN"])
        if int(server["stage"]) == GROW:
            slots = K * self.split_factor
            if SQUARES in uploads:
                stats.append(np.asarray(uploads[SQUARES], dtype=float).sum(axis=0))
            for name, s in zip(("R", "S1", "S2", "H", "Q"), (*stats[:3], total["dH"], *stats[3:])):
                acc = server.get(f"grow.{name}", np.zeros((slots, *s.shape[1:])))
                acc[: len(s)] += s
                server[f"grow.{name}"] = acc
            counts = np.zeros(slots)
            if "dC" in uploads:
                c = np.asarray(uploads["dC"], dtype=float).sum(axis=0)
                counts[: len(c)] = c
            server["grow.C"] = counts
            return self.grow(server)
        for name, s in zip(("R", "S1", "S2"), stats):
            server[name] = server[name] + s[:K]
        server["support"] = server["support"] + total["dH"][:K]
        if SQUARES in uploads:
            server["Q"] = server.get("Q", np.zeros(K)) + np.asarray(uploads[SQUARES], dtype=float).sum(axis=0)[:K]
        server["em_round"] = server["em_round"] + 1
        m = self.aggregate(server)
        if self.splits:  # as plaintext FedEM: a split's new half keeps its place until its records' devices answer
            m = hold_empty(m, server["R"], server)
        if int(server["em_round"]) < self.hard_rounds and swap_due(int(server["em_round"]), self.splits,
                                                                   self.last_swap):
            m = self.swap(server) or m
        return self.keep(server, self.with_caps(server, broadcast_of(
            m, 2 if int(server["em_round"]) < self.hard_rounds else 1)))

    def swap(self, server: State) -> Mixture | None:
        """A swap (models.mixture.swaps), decided by plaintext FedEM's rule on the running sums: the merge made in
        them, and listed in every broadcast after (`merges`) for each device to make in its own contribution
        before its next difference (`merged`); the mixture to broadcast, None when nothing splits."""
        s = plan(server["R"], server["S1"], server["S2"], self.reg, float(server.get(CAP_SCALE, 1.0)),
                 self.min_cluster, server["support"])
        if s is None:
            return None
        merge_columns({k: server[k] for k in ("R", "S1", "S2", "support", "Q") if k in server}, s.a, s.b)
        server["merges"] = np.vstack([server.get("merges", np.zeros((0, 2), dtype=np.int64)), [[s.a, s.b]]])
        server["swaps"] = np.array(len(server["merges"]))  # how many this job made
        return split_in_broadcast(self.aggregate(server), s.covs, s.k, s.b)

    def grow(self, server: State) -> tuple[State, State]:
        """One seeding step on the summed statistics of the broadcast centres (models.mixture.growing.step, plaintext
        FedEM's with seeding="grow" too): the next seeding round's broadcast, or the first mixture's."""
        answered = int(np.sum(server["last.live"])) if "last.live" in server else 1  # where contributions now sit
        K = self.components
        done, centres = growing.step(server, K, K * self.split_factor, self.least_records, self.max_splits,
                                     self.mass_floor)
        if done == "again":
            return server, self.current(server)
        if done == "next":
            assert centres is not None
            return self.keep(server, self.with_caps(server, self.grow_broadcast(centres, answered)))
        # seeded: the last round's centres sat in the first K slots, where the devices' contributions now are
        for name in ("R", "S1", "S2", "H", "Q"):
            if f"grow.{name}" in server:
                server["support" if name == "H" else name] = np.array(server.pop(f"grow.{name}")[:K], dtype=float)
        server["stage"] = np.array(1)
        m = self.aggregate(server)
        return self.keep(server, self.with_caps(server, broadcast_of(m, 2 if self.hard_rounds > 0 else 1)))

    def current(self, server: State) -> State:
        if "last.stage" not in server:
            return self.grow_broadcast(np.zeros((1, self.n_features)))
        return super().current(server)

    @staticmethod
    def announced_clips(broadcast: State) -> dict[str, float]:
        """Differential privacy's clips a broadcast announces (`with_caps`), by upload name; none without."""
        if "dp.clip" not in broadcast:
            return {}
        return dict(zip(DP_NAMES, (float(c) for c in np.asarray(broadcast["dp.clip"], dtype=float))))

    @property
    def squares(self) -> bool:
        """Whether uploads carry the change of the device's squared masses (SQUARES): while the mass share is on
        (mass_cap below 1), and not with differential privacy (they are not among its noised sums)."""
        return self.mass_cap < 1 and not self.dp_clips

    @property
    def least_records(self) -> int:
        """The fewest records a seeding centre keeps (over the fleet; models.mixture.splitting.least_records)."""
        return least_records(self.min_cluster, self.n_features)

    def with_caps(self, server: State, broadcast: State) -> State:
        """The weight caps of the statistics phase, for each device to cap its own weight, the clips the job
        announces, and every merge the job's swaps made so far (for each device to make in its own contribution)."""
        if "merges" in server:
            broadcast = {**broadcast, "merges": np.asarray(server["merges"], dtype=np.int64)}
        if self.dp_clips:  # and differential privacy's clip of each change (DP_NAMES order)
            broadcast = {**broadcast, "dp.clip": np.array([self.dp_clips[k] for k in DP_NAMES])}
        if CAP_LEVEL in server:
            return {**broadcast, "cap": np.array([float(server[CAP_LEVEL]), float(server[CAP_SCALE])])}
        return broadcast

    def aggregate(self, server: State) -> Mixture:
        """The M-step on the sums; a component of less than `mass_floor` weight gets the pooled statistics (noisy
        sums: post-processing, no privacy cost)."""
        R = np.asarray(server["R"], dtype=float)
        if self.mass_floor > 0:  # noisy sums: no negative mass, and a fleet's worth at least
            R = np.maximum(R, 0.0)
            R = R if R.sum() >= self.mass_floor else R + self.mass_floor / len(R)
        floor = self.mass_floor / max(float(R.sum()), 1e-300)
        return m_step(R, server["S1"], server["S2"], self.reg, min_mass=max(floor, 1e-6))

    def support_view(self, server: State) -> SupportView | None:
        """The count from the summed 0/1 rows, and the mass share bounded from the summed squared masses
        (`mass_shares`)."""
        if int(server["stage"]) == GROW or not float(server["devices"]):
            return None
        heaviest = None
        if self.squares and "Q" in server:
            R, Q = np.asarray(server["R"], dtype=float), np.asarray(server["Q"], dtype=float)
            heaviest = lambda m: mass_shares(R, Q, m)  # noqa: E731
        view = SupportView(np.asarray(server["support"]), int(round(float(server["devices"]))), self.min_support,
                           self.mass_cap, heaviest)
        if self.dp_clips and not support_mask(view).any():  # noisy counts that leave no component shared: the noise
            # swamped the rule (a small fleet), which then shares every component (a model the devices can use)
            return SupportView(view.support, view.devices, 0, self.mass_cap, heaviest)
        return view

    def client_finish(self, state: State, broadcast: State) -> State:
        """A device whose support change was withheld (the sum's check failed) keeps the row the sums hold."""
        if WITHHELD in broadcast and WITHHELD_ROW in state:
            return {**state, "H": np.array(state[WITHHELD_ROW], dtype=float)}
        return state

    def upload_bytes(self) -> int:
        """A training round's upload as float64 values (what the secure sum encodes: models.private.transport);
        a seeding round's is split_factor times larger."""
        K, d = self.components, self.n_features
        return K * (2 + d + self.packed) * 8 + 8

    row_tables = ()

    def table_lengths(self, server: State) -> dict[str, int]:
        return {}

    def upload_shapes(self, broadcast: State) -> dict[str, tuple[int, ...]]:
        """One device's upload's shapes for this broadcast (what a secure sum of the round announces)."""
        K, d, p = self.components, self.n_features, self.packed
        upto = int(broadcast["span"]) if int(broadcast["stage"]) == GROW else K
        shapes = {"dR": (upto,), "dS1": (upto, d), "dS2": (upto, p), "dH": (upto,), "dN": ()}
        if self.squares:
            shapes[SQUARES] = (upto,)
        return {**shapes, "dC": (upto,)} if int(broadcast["stage"]) == GROW else shapes


def merged(state: State, broadcast: State) -> tuple[State, int]:
    """Each device's contribution (its control variate: R, S1, S2 and its support row H) with the merges of the
    job's swaps it has not made yet, in order (models.mixture.swaps.merge_columns), as the server's sums now hold
    it; and how many merges the job has made. A support row then counts a device in both merged components twice
    until it answers again (the server's count is its sum), and its next change of that count may be as low as
    -(1 + merges since): `summed_scales` makes room for it."""
    pairs = np.asarray(broadcast.get("merges", np.zeros((0, 2))), dtype=np.int64).reshape(-1, 2)
    done = np.asarray(state.get("merged", np.zeros(len(state["R"]))), dtype=np.int64)
    if not (done < len(pairs)).any():
        return state, len(pairs)
    names = [k for k in ("R", "S1", "S2", "H", "Q") if k in state]
    state = {**state, **{k: np.array(state[k], dtype=float) for k in names}}
    for i, start in enumerate(done):
        for a, b in pairs[start:]:
            merge_columns({k: state[k][i] for k in names}, int(a), int(b))
    return state, len(pairs)


def _pad(a: np.ndarray, slots: int) -> np.ndarray:
    out = np.zeros((slots, *a.shape[1:]))
    out[: len(a)] = a
    return out


#: the bound private mode announces on standardised values (standard deviations of the fleet's log-scaled features):
#: a component whose records lie further out on average has its statistics clipped (counted, `clipped_values`)
PRIVATE_VALUE_BOUND = 64.0


def dp_clips(n_features: int, least_records: int) -> dict[str, float]:
    """Differential privacy's L2 clip of a device's upload in a mixture round (models.private.dp), its weight 1: the
    change of its shares per component (two distributions differ by at most sqrt 2), of its per-record sums
    (sqrt d: a record at one standard deviation in every feature) and sums of squares (d), of its support row
    (4: eight components gained or lost), its first contribution (1), and a seeding round's records per centre
    (the seeding's least records: one device can keep a centre alive alone, no more)."""
    d = float(n_features)
    return {"dR": float(np.sqrt(2.0)), "dS1": float(np.sqrt(d)), "dS2": d, "dH": 4.0, "dN": 1.0,
            "dC": float(least_records)}


def summed_transport(clip: float, seed: int, dropout: float, most: float = 1.0, swaps: int = 0) -> Any:
    """The secure sum of a private mixture job's rounds (models.private.transport.SecureTransport): each device divides
    its statistics by the powers of the job's bound on standardised values (PRIVATE_VALUE_BOUND: per record, a sum is
    at most the bound, a sum of squares its square), so that every value lies within `clip` (its largest capped
    weight), and clips them there; a seeding round's record counts are divided by `most`, the most records a device
    claimed, and the support rows' changes by room for the job's `swaps` (`summed_scales`). (Imported here: private
    mode's `cryptography` is an optional extra.)"""
    from models.private.transport import SecureTransport

    return SecureTransport(summed_scales(most, swaps), clip, dropout, seed)


def summed_scales(most: float, swaps: int = 0) -> dict[str, float]:
    """What each upload name is divided by before its secure sum (`summed_transport`). A support row's change lies
    in [-(1 + swaps), 1] (`merged`: a merged column counts a device up to once per component merged into it): it is
    divided by the least power of two above that, which the fixed-point encoding keeps exact (a count must not come
    out a hair below the support rule's)."""
    b = PRIVATE_VALUE_BOUND
    room = 2.0 ** int(np.ceil(np.log2(1 + max(int(swaps), 0))))
    # a squared weighted mass is at most the squared clip: within the clip once divided by the bound (clips up to it)
    return {"dR": 1.0, "dS1": b, "dS2": b * b, "dH": room, "dN": 1.0, "dC": most, SQUARES: b}
