"""FedEM: a Gaussian mixture trained by FedMM on the E-step's sufficient statistics (seed 003, Sec. 2.3 and
App. C.2: EM is an MM algorithm whose surrogate is linear in those statistics).

Each sampled device uploads, under the broadcast mixture, its statistics per component (R_k, S1_k, S2_k;
models.mixture.gmm) divided by its record count. The server keeps every device's last upload as a control
variate and the weighted running sum of them; the M-step on that sum is the next broadcast. With step 1 this
is incremental EM (Neal and Hinton, 1998): every round replaces the sampled devices' stale statistics by
fresh ones, the free energy never increases, and under partial participation the fixed points are those of
pooled EM. Weights are the devices' capped shares (models.detection.screening), as for every other job.

Seeding (the first round with answers; a job asks every participant, as in its statistics phase): EM needs
a starting mixture, and a random one in 20+ dimensions leaves most components empty. Each device clusters its
own records (k-means) and uploads the statistics of its clusters, in the same shape as an E-step upload; the
server merges the clusters of all seeding devices into K by weighted k-means on their means (k-FED, Dennis et
al. 2021) and takes the M-step of the merged statistics. A device uploads only clusters of at least
``min_cluster`` records. With ``seed_rows`` (the default) each seeding device's clusters, summed per component
they merged into, become its first control-variate row, so the aggregate starts as the seeding's statistics
of every device and a round replaces only its sampled devices' rows. Without them the first round's M-step
saw only the ~10 % sampled devices: every component they did not reach fell to the pooled moments and never
came back (ton-iot, K=128: 58 of 128 components lost after round 1). With ``seeding="split"`` the server groups the
clusters by splitting on their summed statistics instead (models.mixture.splitting, private mode's rule); measured
across 45 runs it steadied nsl-kdd but lost attacks on ton-iot, so k-FED's merge stays the default
(benchmarks/results/stability.md). With ``seeding="grow"`` no device uploads its clusters: the mixture grows from
the fleet's sums over several seeding rounds of every device, by private mode's own step (models.mixture.growing;
the simulator only), so that plaintext can run the model private mode runs (issue 23 point 5;
benchmarks/private_same_model.py).

k-means rounds (the first ``hard_rounds`` after seeding; by default every round): each sampled device
assigns every record to the nearest component mean and uploads the statistics of that hard assignment (same
shape, same control variates, same checks); EM rounds follow once they are done. These are the Lloyd passes
over records that pooled EM gets from its k-means start: without them the federated start lands EM in a
worse optimum (ton-iot, 3 seeds: AUC 0.89-0.91 and 16-24 % of attacks caught at 2 % false positives without,
0.94-0.95 and 29-32 % with 30 of them). On IoT flows (ton-iot) EM rounds then lose detection while they gain
held-out likelihood (seed rows on, ridge 1e-4: 49.5 % caught at 1.5 % false positives with k-means rounds
throughout), so that is the default; nsl-kdd measures best with 30 k-means rounds, then EM, and a ridge of
0.2 (README).

Checks (the device's own claims from the statistics phase make every upload checkable): the statistics of
an upload must add up, over components, to the device's first and second moments reported in the statistics
phase (sum_k R_k = 1, sum_k S1_k = its mean, diag sum_k S2_k = its mean square); an upload that does not,
or whose component covariances are not positive semi-definite, is refused.
"""

from __future__ import annotations

import zlib
from typing import ClassVar

import numpy as np

from models.core.federated import FederatedAlgorithm, State, SupportView
from models.core.pipeline import CAP_SCALE, support_mask
from models.mixture import control, growing
from models.mixture.gmm import Mixture, e_step, hard_stats, kmeans, m_step, nearest, soft_stats, triu_unpack
from models.mixture.splitting import MAX_SPLITS, grouped_sums, least_records, split_labels
from models.mixture.swaps import hold_empty, last_swap, swap, swap_due, swaps_allowed

#: how the seeding merges the devices' clusters (FedEM.merge_labels), or "grow": no device's clusters, the mixture
#: grown from the fleet's sums over several seeding rounds of every device, as private mode seeds
#: (models.mixture.growing; the simulator only)
SEEDINGS = ("merge", "split", "grow")
#: how the support rule's mass share is read: each device's mass ("exact", from the table's rows), or bounded from
#: the sums of masses and squared masses as private mode must ("bound", models.mixture.heaviest.mass_shares)
MASS_SHARES = ("exact", "bound")
#: what one upload may weigh (issue 11: at most 256 KiB per device and round)
UPLOAD_BUDGET = 256 * 1024
CANDIDATE_COMPONENTS = (128, 64, 32, 16, 8)
#: the ridge added to every covariance (standardised units): FedEM's default and the pooled detector's
DEFAULT_REG = 1e-4
#: the most further ridges a job may score with (each costs a mixture's scoring on every device)
MAX_RIDGES = 3
#: the most candidate ridges a component may choose from (models.mixture.component_ridges)
MAX_CHOICES = 8
#: how a component chooses among them: the held-out records' likelihood, or the least volume holding them
RIDGE_CRITERIA = ("likelihood", "volume")
#: how a record's score reads a mixture: "mixture", its density (weights included); "component", its best single
#: component's, weight-free (-max_k log N(x | mu_k, Sigma_k): a light component of rare normal traffic scores its
#: records as a heavy one would); "both", each, put on one scale by their tails on the fleet's held-out records
#: (models.mixture.ridges: a record scores by its smallest tail probability)
SCORINGS = ("mixture", "component", "both")
#: which tails score a record (models.mixture.component_tails): the fleet's alone ("none"), its component's ("own"),
#: or the smaller tail probability of the two ("both")
TAILS = ("none", "own", "both")
#: deterministic annealing's cooling a round, and the temperature below which the rounds are k-means rounds
ANNEAL_DECAY, ANNEAL_FLOOR = 0.9, 1e-3


def default_components(n_features: int, float32: bool = True) -> int:
    """The most components (of CANDIDATE_COMPONENTS) whose E-step statistics fit UPLOAD_BUDGET: 128 for
    22 features, 64 for 33. More components fit rare regions of traffic; measured on ton-iot (K=64: AUC
    0.91, K=128: 0.94) and nsl-kdd (K=64 as good as 32)."""
    per = (1 + n_features + n_features * (n_features + 1) // 2) * (4 if float32 else 8)
    return next((k for k in CANDIDATE_COMPONENTS if k * per <= UPLOAD_BUDGET), 1)


def device_seed(job_seed: int, position: int | str) -> int:
    """The seed of a device's own clustering in the seeding round: from the job's seed and the device's position
    among the job's participants (the seeding round lists all of them, in the coordinator's order), so the
    simulator's client i and the deployment's i-th participant cluster alike. Above the switch
    (models.core.sampling) no round lists them: the device's id stands for its position."""
    who = str(int(position)) if isinstance(position, int | np.integer) else str(position)
    return (int(job_seed) * 1_000_003 + zlib.crc32(who.encode())) % 2**31


def mixture_of(broadcast: State) -> Mixture:
    return Mixture(broadcast["pi"], broadcast["means"], broadcast["prec_chol"])


def shared_of(broadcast: State) -> np.ndarray:
    """Which components are normal for the whole fleet (enough devices support them); all of them in a broadcast
    without the mask."""
    shared = broadcast.get("shared")
    return np.ones(len(broadcast["pi"]), bool) if shared is None else np.asarray(shared) > 0.5


def broadcast_of(m: Mixture, stage: int, shared: np.ndarray | None = None) -> State:
    # "pi", not "weights": a round message's "weights" are the devices' (coordinator.detector_job)
    mask = np.ones(m.n_components) if shared is None else np.asarray(shared, dtype=float)
    return {"pi": m.weights, "means": m.means, "prec_chol": m.prec_chol, "stage": np.array(stage), "shared": mask}


def shared_components(support: np.ndarray, devices: int, min_support: int) -> np.ndarray:
    """Which components at least `min_support` devices support (the support rule's count, without the mass
    share; models.core.pipeline.support_mask)."""
    return support_mask(SupportView(np.asarray(support), devices, min_support))


#: the share of a shared component's mass that its heaviest `colluders` devices may hold (models.mixture.fedem:
#: FedEM.shared): not the majority. Two compliant rogues of 21 put 90 % (synthetic) and 92 % (nsl-kdd) of one shared
#: component's mass there; claiming the most records admitted (`inflate`) lifted their share of the components their
#: attack records share with honest devices from 40-57 % to 47-62 % (synthetic, seed 0), which a cap of 0.8 let
#: through (AUC 0.992 -> 0.942). Honest 100-device fleets put at most 14 % (median), 11- and 21-device fleets about
#: 50 %: the components beyond it stay personal to the devices holding them (docs/robustness.md has the cost)
MASS_CAP = 0.5


def colluders(min_support: int) -> int:
    """How many devices the fleet's statistics assume may act together: fewer than the support rule's
    `min_support` (s colluders defeat a rule of s supporters by construction), at least one. The threshold
    leaves that many devices out at the top and winsorises that many at each side of the rest
    (models.detection.screening.exceedance_threshold)."""
    return max(1, min_support - 1)


class FedEM(FederatedAlgorithm):
    name = "fedem"
    #: attacks that mean nothing for it (models.detection.attacks.not_applicable)
    not_attacked: ClassVar[dict[str, str]] = {
        "rotated": "rotated turns a PCA upload away from the consensus subspace; a mixture has none"}

    def __init__(self, n_features: int, components: int | None = None, reg: float = DEFAULT_REG, min_cluster: int = 5,
                 float32: bool = True, tolerance: float = 1e-3, hard_rounds: int = 100_000, seed_rows: bool = True,
                 min_support: int = 3, control_rows: int | None = None, mass_cap: float = MASS_CAP,
                 seeding: str = "merge", ridges: list[float] | None = None, splits: int | None = None,
                 rounds: int | None = None, fraction: float | None = None,
                 component_ridges: list[float] | None = None, ridge_criterion: str = "likelihood",
                 anneal: float = 0.0, mass_share: str = "exact", scoring: str = "mixture",
                 component_tails: str = "none", coarse: int = 0):
        components = default_components(n_features, float32) if components is None else components
        if not 1 <= components <= 1024:
            raise ValueError("components must be between 1 and 1024")
        if not 0 < reg <= 10:
            raise ValueError("reg must be in (0, 10]")
        if not 1 <= min_cluster <= 10_000:
            raise ValueError("min_cluster must be between 1 and 10000")
        self.n_features, self.components, self.reg = int(n_features), int(components), float(reg)
        self.min_cluster, self.float32 = int(min_cluster), bool(float32)
        self.tolerance = float(tolerance)
        if not 0 <= hard_rounds <= 100_000:
            raise ValueError("hard_rounds must be between 0 and 100000")
        self.hard_rounds = int(hard_rounds)
        self.seed_rows = bool(seed_rows)
        if seeding not in SEEDINGS:
            raise ValueError(f"seeding must be one of {', '.join(SEEDINGS)}")
        self.seeding = seeding
        if not 0 <= min_support <= 1000:
            raise ValueError("min_support must be between 0 (every component shared) and 1000 devices")
        self.min_support = int(min_support)
        if control_rows is not None and not 1 <= control_rows <= 10_000_000:
            raise ValueError("control_rows must be between 1 and 10000000 (devices whose last statistics the server "
                             "keeps)")
        self.control_rows = control_rows
        if not 0 < mass_cap <= 1:
            raise ValueError("mass_cap must be in (0, 1] (the share of a component's mass its colluders may hold; "
                             "1 turns the rule off)")
        self.mass_cap = float(mass_cap)
        if mass_share not in MASS_SHARES:
            raise ValueError(f"mass_share must be one of {', '.join(MASS_SHARES)}")
        self.mass_share = mass_share
        ridges = list(ridges or [])
        if len(ridges) > MAX_RIDGES or not all(0 < r <= 10 for r in ridges):
            raise ValueError(f"ridges must be at most {MAX_RIDGES} further ridges, each in (0, 10]")
        self.ridges = [float(r) for r in ridges]
        choices = list(component_ridges or [])
        if len(choices) > MAX_CHOICES or not all(0 < r <= 10 for r in choices) or (choices and ridges):
            raise ValueError(f"component_ridges must be at most {MAX_CHOICES} candidate ridges, each in (0, 10], and "
                             "not beside further ridges (ridges)")
        #: candidate ridges, one chosen per component from the held-out records by `ridge_criterion`
        #: (models.mixture.component_ridges)
        self.component_ridges = [float(r) for r in choices]
        if ridge_criterion not in RIDGE_CRITERIA:
            raise ValueError(f"ridge_criterion must be one of {', '.join(RIDGE_CRITERIA)}")
        self.ridge_criterion = ridge_criterion
        if not 0 <= anneal <= 100:
            raise ValueError("anneal must be in [0, 100] (the k-means rounds' first temperature; 0: none)")
        #: deterministic annealing in the k-means rounds: the first temperature, which falls by ANNEAL_DECAY a round
        self.anneal = float(anneal)
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}")
        #: how the trained mixture scores a record (models.mixture.detector.SCORINGS); training is the same
        self.scoring = scoring
        if component_tails not in TAILS:
            raise ValueError(f"component_tails must be one of {', '.join(TAILS)}")
        #: score by each component's own tail of held-out scores, or by the smaller tail probability of that and the
        #: fleet's (models.mixture.component_tails)
        self.component_tails = component_tails
        if coarse and not 2 <= coarse <= self.components:
            raise ValueError(f"coarse must be 0 (none) or between 2 and the components ({self.components})")
        #: score also by the mixture merged into components / coarse (models.mixture.coarse; 0: none)
        self.coarse = int(coarse)
        if splits is not None and not 0 <= splits <= 1000:
            raise ValueError("splits must be between 0 (none) and 1000 (swaps in the k-means rounds, "
                             "models.mixture.swaps)")
        if (rounds is not None and not 1 <= rounds <= 100_000) or (fraction is not None and not 0 < fraction <= 1):
            raise ValueError("rounds must be between 1 and 100000 and fraction in (0, 1] (the job's)")
        #: the last round a swap may end (a split settles as the devices answer: each once, on average, after it);
        #: None: the job's rounds are not known here (a device), and `splits` alone bounds the swaps
        self.last_swap = last_swap(rounds, fraction)
        self.splits = swaps_allowed(splits, self.last_swap)

    @property
    def packed(self) -> int:
        d = self.n_features
        return d * (d + 1) // 2

    def capacity(self, n_clients: int) -> int:
        """Rows of the server's table of control variates (models.mixture.control): every device while they fit
        its memory budget."""
        if self.control_rows is not None:
            return min(self.control_rows, n_clients)
        K, d = self.components, self.n_features
        row = K * (1 + d + self.packed) * (4 if self.float32 else 8) + K + 24
        return control.default_capacity(n_clients, row)

    # -- start -----------------------------------------------------------------------------------------
    def init_server(self, n_clients: int, rng: np.random.Generator) -> tuple[State, State]:
        K, d, p = self.components, self.n_features, self.packed
        server: State = {
            "stage": np.zeros((), dtype=np.int64),  # 0 until the seeding devices' clusters are merged
            "em_round": np.zeros((), dtype=np.int64),  # rounds since seeding (the first hard_rounds: k-means)
            "seed": np.array(rng.integers(2**31)),
            **control.empty_table(n_clients, self.capacity(n_clients), K, d, p,
                                  np.float32 if self.float32 else np.float64),
            "rejected": np.zeros(()),
        }
        if self.seeding == "grow":  # private mode's seeding, in the clear (models.mixture.growing)
            server.update(stage=np.array(growing.GROW), refined=np.zeros((), dtype=np.int64))
            return server, growing.grow_broadcast(K, np.zeros((1, d)))
        return server, broadcast_of(self.placeholder(), 0)

    def init_clients(self, data: State, broadcast: State) -> State:
        return {"nll": np.zeros(len(data["X"]))}

    # -- device ----------------------------------------------------------------------------------------
    def client_update(self, state: State, data: State, broadcast: State) -> tuple[State, State]:
        if int(broadcast["stage"]) == growing.GROW:
            return state, self.grow_statistics(data, broadcast)
        seeding = int(broadcast["stage"]) == 0
        m = None if seeding else mixture_of(broadcast)
        Rs, S1s, S2s, nll = [], [], [], []
        for b, X in enumerate(data["X"]):
            n = max(len(X), 1)
            if seeding:
                R, S1, S2 = self._local_clusters(X, np.random.default_rng(int(data["seed"][b])))
                ll = 0.0
            else:
                assert m is not None
                R, S1, S2, ll = self.round_statistics(X, m, int(broadcast["stage"]),
                                                      float(broadcast.get("temperature", 0.0)))
            Rs.append(R / n)
            S1s.append(S1 / n)
            S2s.append(S2 / n)
            nll.append(-ll / n)
        up = {"R": np.stack(Rs), "S1": np.stack(S1s), "S2": np.stack(S2s)}
        if self.float32:
            up = {k: v.astype(np.float32) for k, v in up.items()}
        return {"nll": np.array(nll)}, up

    def grow_statistics(self, data: State, broadcast: State) -> State:
        """A seeding round's upload of ``seeding="grow"`` (models.mixture.growing): the statistics of each device's
        records under their nearest broadcast centre, per record, and its records per centre (C)."""
        live = np.flatnonzero(np.asarray(broadcast["live"]) > 0)
        K = self.components
        up: dict[str, list[np.ndarray]] = {"R": [], "S1": [], "S2": [], "C": []}
        for X in data["X"]:
            n = max(len(X), 1)
            R, S1, S2 = hard_stats(X, live[nearest(X, broadcast["centres"][live])], K)
            for k, v in zip(("R", "S1", "S2", "C"), (R / n, S1 / n, S2 / n, R)):
                up[k].append(v)
        out = {k: np.stack(v) for k, v in up.items()}
        return {k: v.astype(np.float32) for k, v in out.items()} if self.float32 else out

    def round_statistics(self, X: np.ndarray, m: Mixture, stage: int,
                         temperature: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """A training round's statistics of a device's records under the broadcast mixture, and their
        log-likelihood: in a k-means round (stage 2) every record to its nearest mean (log-likelihood 0; shared among
        the means at a temperature above 0, deterministic annealing), else the E-step."""
        if stage == 2 and temperature > 0:
            return (*soft_stats(X, m.means, temperature), 0.0)
        if stage == 2:
            return (*hard_stats(X, nearest(X, m.means), self.components), 0.0)
        return e_step(X, m)

    def _local_clusters(self, X: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Statistics of the device's own k-means clusters of at least min_cluster records each (the
        rest of its records form no cluster and are not uploaded), padded to K."""
        K, d = self.components, self.n_features
        R, S1, S2 = np.zeros(K), np.zeros((K, d)), np.zeros((K, self.packed))
        k = min(K, len(X) // self.min_cluster)
        if k >= 1:
            _, labels = kmeans(X, k, rng)
            r, s1, s2 = hard_stats(X, labels, k)
            big = r >= self.min_cluster
            n_big = int(big.sum())
            R[:n_big], S1[:n_big], S2[:n_big] = r[big], s1[big], s2[big]
        return R, S1, S2

    # -- server ----------------------------------------------------------------------------------------
    def server_update(self, server: State, client_ids: np.ndarray, uploads: State,
                      weight: np.ndarray) -> tuple[State, State]:
        ids = np.asarray(client_ids, dtype=np.int64)
        weight = np.asarray(weight, dtype=float)
        if len(ids) == 0 or not all(k in uploads for k in ("R", "S1", "S2")):
            return server, self.current(server)  # nobody answered in time: the mixture stays as it is
        R, S1, S2 = (np.asarray(uploads[k], dtype=float) for k in ("R", "S1", "S2"))
        seeding = int(server["stage"]) == 0
        server = control.upgrade(server, self.capacity(len(server["slot"])))
        if int(server["stage"]) == growing.GROW:
            return self._grow(server, ids, R, S1, S2, np.asarray(uploads["C"], dtype=float), weight)
        if seeding:
            return self._seed(server, ids, R, S1, S2, weight)
        server["em_round"] = server["em_round"] + 1
        control.write(server, ids, weight, (R, S1, S2), int(server["em_round"]))
        m = self.aggregate(server)
        server["swapped"] = np.array(0)
        if self.splits:
            m = hold_empty(m, control.aggregate(server)[0], server)
        if int(server["em_round"]) < self.hard_rounds and swap_due(int(server["em_round"]), self.splits,
                                                                   self.last_swap):
            m = swap(server, self.reg, float(server.get(CAP_SCALE, 1.0)),
                     self.min_cluster) or m
        # the support rule (models.core.pipeline.support) then says which components are shared
        out = broadcast_of(m, 2 if int(server["em_round"]) < self.hard_rounds else 1)
        if self.anneal:
            out["temperature"] = np.array(self.temperature(int(server["em_round"])))
        return self.keep(server, out)

    def temperature(self, em_round: int) -> float:
        """Deterministic annealing's temperature for the round after `em_round` (0: k-means)."""
        t = self.anneal * ANNEAL_DECAY ** em_round
        return t if t >= ANNEAL_FLOOR else 0.0

    def screen(self, server: State, client_ids: np.ndarray, uploads: State) -> np.ndarray | None:
        """1 for the uploads that add up to their devices' statistics-phase claims (`consistent`), 0 for the others
        (refused); None before the claims are known."""
        ids = np.asarray(client_ids, dtype=np.int64)
        if "mean_sq" not in server or not len(ids) or not all(k in uploads for k in ("R", "S1", "S2")):
            return None
        R, S1, S2 = (np.asarray(uploads[k], dtype=float) for k in ("R", "S1", "S2"))
        ok = self.consistent(R, S1, S2, server["mean"][ids], server["mean_sq"][ids], int(server["stage"]) == 0)
        return ok.astype(float)

    def aggregate(self, server: State) -> Mixture:
        """The M-step of every device's last statistics, summed (weighted by the devices' shares)."""
        return m_step(*control.aggregate(server), self.reg)

    def widened(self, server: State) -> list[Mixture]:
        """The M-step of the same statistics at each further ridge (models.mixture.ridges), or at each candidate of
        the components' ridges (models.mixture.component_ridges): no round, no upload."""
        stats = control.aggregate(server) if "R" in server else None
        return [m_step(*stats, r) for r in self.ridges or self.component_ridges] if stats is not None else []

    def support_view(self, server: State) -> SupportView | None:
        """Support, not volume, makes normal (the pipeline's support rule, models.core.pipeline.support_mask): a
        device supports a component when SUPPORT_SHARE of its records fall in it, counted over every device's last
        upload. A device that trains honestly on poisoned traffic supports its attack components alone; they stay
        out of the fleet's model (that device keeps them as its own). Colluders whose attack records share a
        component with honest traffic (so that enough devices support it) still cannot make it theirs: a
        component more than `mass_cap` of whose mass its heaviest devices hold stays out too (with
        ``mass_share="bound"``, that share bounded from sums of masses and squared masses, as private mode must:
        models.mixture.heaviest.mass_shares). None while the table holds no device (seeding without seed rows:
        every component shared)."""
        devices, counts = control.devices_and_support(server) if "rows" in server else (0, None)
        if not devices or counts is None:
            return None
        share = control.bounded_share if self.mass_share == "bound" else control.heaviest_share
        return SupportView(counts, devices, self.min_support, self.mass_cap, lambda m: share(server, m))

    def restrict(self, server: State, broadcast: State, shared: np.ndarray) -> State:
        broadcast = {**broadcast, "shared": np.asarray(shared, dtype=float)}
        server["last.shared"] = broadcast["shared"]
        return broadcast

    def shared(self, server: State) -> np.ndarray:
        """The components the support rule shares (every one while it has nothing to count)."""
        view = self.support_view(server)
        return support_mask(view) if view is not None else np.ones(self.components, bool)

    def counted(self, server: State) -> np.ndarray:
        """The components at least `min_support` devices support (the count, before the mass share)."""
        devices, support = control.devices_and_support(server)
        return shared_components(support, devices, self.min_support)

    def kept_out(self, server: State, rows: np.ndarray) -> np.ndarray:
        """For each of these table rows, how many of the components its device supports too few devices support
        (the count rule): the device's own traffic, kept out of the shared model. Components the mass share keeps
        out are not put on any one device (`mass_kept_out`): the device holding most of one can be an honest
        device with traffic of its own as well as a rogue, and flagging it every round would cry wolf."""
        rows = np.asarray(rows, dtype=np.int64)
        return np.asarray(((server["H_rows"][rows] > 0) & ~self.counted(server)).sum(axis=1))

    def mass_kept_out(self, server: State, shared: np.ndarray) -> int:
        """How many components enough devices support but the mass share keeps out of the shared model."""
        return int(np.count_nonzero(self.counted(server) & ~np.asarray(shared)))

    def _seed(self, server: State, ids: np.ndarray, R: np.ndarray, S1: np.ndarray,
              S2: np.ndarray, weight: np.ndarray) -> tuple[State, State]:
        """Merge the seeding devices' clusters into K components (or keep seeding while none came). With
        seed_rows, each seeding device's clusters, summed per component they merged into, become its first
        control-variate row (the M-step of their sum is the merged mixture itself)."""
        keep = R > 0
        if not keep.any():
            return server, self.current(server)
        w = weight[:, None]  # the merge weighs each device's clusters by its share
        wR, wS1, wS2 = R * w, S1 * w[..., None], S2 * w[..., None]
        # records per cluster (a capped device's count as its capped weight: fewer, never more)
        records = R * w * float(server.get(CAP_SCALE, 1.0))
        labels = self.merge_labels(wR[keep], wS1[keep], wS2[keep], records[keep],
                                   np.random.default_rng(int(server["seed"])))
        if self.seed_rows:
            dev, K = np.nonzero(keep)[0], self.components
            grouped = []
            for stat in (R, S1, S2):
                g = np.zeros((len(ids), K, *stat.shape[2:]))
                np.add.at(g, (dev, labels), stat[keep])
                grouped.append(g)
            control.write(server, ids, weight, (grouped[0], grouped[1], grouped[2]), 0)
            m = self.aggregate(server)
        else:
            m = m_step(*grouped_sums(wR[keep], wS1[keep], wS2[keep], labels, self.components), self.reg)
        server["stage"] = np.array(1)
        out = broadcast_of(m, 2 if self.hard_rounds > 0 else 1)
        if self.anneal:
            out["temperature"] = np.array(self.temperature(0))
        return self.keep(server, out)

    def _grow(self, server: State, ids: np.ndarray, R: np.ndarray, S1: np.ndarray, S2: np.ndarray, C: np.ndarray,
              weight: np.ndarray) -> tuple[State, State]:
        """A seeding step of ``seeding="grow"`` on the weighted sums of the round's uploads (models.mixture.growing,
        private mode's step); once seeded, each device's last seeding upload (its statistics under the first
        mixture's centres) is its first control-variate row."""
        w = weight[:, None]
        server["grow.R"], server["grow.C"] = (R * w).sum(axis=0), C.sum(axis=0)
        server["grow.S1"], server["grow.S2"] = (S1 * w[..., None]).sum(axis=0), (S2 * w[..., None]).sum(axis=0)
        K = self.components
        done, centres = growing.step(server, K, K, least_records(self.min_cluster, self.n_features), MAX_SPLITS)
        if done == "again":
            return server, self.current(server)
        if done == "next":
            assert centres is not None
            return self.keep(server, growing.grow_broadcast(K, centres))
        for key in ("grow.R", "grow.S1", "grow.S2", "grow.rounds", "refined"):
            server.pop(key, None)
        control.write(server, ids, weight, (R, S1, S2), 0)
        server["stage"] = np.array(1)
        return self.keep(server, broadcast_of(self.aggregate(server), 2 if self.hard_rounds > 0 else 1))

    def merge_labels(self, R: np.ndarray, S1: np.ndarray, S2: np.ndarray, records: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
        """The component each seeding cluster (weighted statistics, records) merges into: k-means on the
        clusters' means ("merge", k-FED) or splitting on their summed statistics ("split",
        models.mixture.splitting)."""
        if self.seeding == "split":
            return split_labels(R, S1, S2, records, self.components,
                                least_records(self.min_cluster, self.n_features))
        return merge_labels(R, S1, self.components, rng)

    @staticmethod
    def keep(server: State, broadcast: State) -> tuple[State, State]:
        """Remember the broadcast in the server state (a round without acceptable answers repeats it)."""
        for k, v in broadcast.items():
            server[f"last.{k}"] = v
        return server, broadcast

    def current(self, server: State) -> State:
        if "last.pi" not in server and "last.centres" in server:  # a seeding round of seeding="grow"
            return {k[5:]: v for k, v in server.items() if k.startswith("last.")}
        if "last.pi" not in server:
            if self.seeding == "grow":
                return growing.grow_broadcast(self.components, np.zeros((1, self.n_features)))
            return broadcast_of(self.placeholder(), 0)
        return {k[5:]: v for k, v in server.items() if k.startswith("last.")}

    def placeholder(self) -> Mixture:
        """What the broadcast carries while seeding (no device scores with it)."""
        K, d = self.components, self.n_features
        return Mixture(np.full(K, 1.0 / K), np.zeros((K, d)), np.broadcast_to(np.eye(d), (K, d, d)).copy())

    def consistent(self, R: np.ndarray, S1: np.ndarray, S2: np.ndarray, mean: np.ndarray, mean_sq: np.ndarray,
                   seeding: bool) -> np.ndarray:
        """Which uploads add up to the device's statistics-phase claims. Seeding uploads cover only the
        device's clusters (at most all of its records): their totals may only fall short."""
        tol = self.tolerance
        total = R.sum(axis=1)
        first = S1.sum(axis=1)
        d = self.n_features
        diag_idx = np.array([i * d - i * (i - 1) // 2 for i in range(d)])  # positions of (i, i) in triu_pack
        second = S2[..., diag_idx].sum(axis=1)
        finite = np.isfinite(R).all(axis=1) & np.isfinite(S1).all(axis=(1, 2)) & np.isfinite(S2).all(axis=(1, 2))
        nonneg = (R >= 0).all(axis=1) & (S2[..., diag_idx] >= -tol).all(axis=(1, 2))
        if seeding:
            ok = (total <= 1 + tol) & (second <= mean_sq * (1 + tol) + tol).all(axis=1)
        else:
            scale = np.sqrt(np.maximum(mean_sq, 1e-12))
            ok = (np.abs(total - 1) <= tol) & (np.abs(first - mean) <= tol * (1 + scale)).all(axis=1) & \
                (np.abs(second - mean_sq) <= tol * (1 + mean_sq)).all(axis=1)
        return finite & nonneg & ok & moments_psd(R, S1, S2, self.n_features)

    def attach_bounds(self, server: State, mean: np.ndarray, mean_sq: np.ndarray) -> State:
        """Each device's standardised mean and mean square, from the statistics phase."""
        return {**server, "mean": np.asarray(mean, dtype=float), "mean_sq": np.asarray(mean_sq, dtype=float)}

    row_tables: tuple[str, ...] = ("slot", "mean", "mean_sq", "owner", "seen", "W_rows", "R_rows", "S1_rows",
                                   "S2_rows", "H_rows")

    def touched(self, server: State, client_ids: np.ndarray) -> dict[str, np.ndarray]:
        """The rows a step changed: its devices', or every row in use after a swap merged two components in all
        of them (models.mixture.swaps)."""
        out = control.touched(server, client_ids)
        if int(server.get("swapped", 0)):
            every = np.arange(int(server["rows"]))
            out.update({k: every for k in ("R_rows", "S1_rows", "S2_rows", "H_rows")})
        return out

    def table_lengths(self, server: State) -> dict[str, int]:
        """The table's rows in use: what is stored (the rest of its capacity holds nothing)."""
        n = int(server["rows"])
        return {k: n for k in ("owner", "seen", "W_rows", "R_rows", "S1_rows", "S2_rows", "H_rows")}

    def consensus(self, broadcast: State) -> Mixture:
        return mixture_of(broadcast)

    def upload_bytes(self) -> int:
        return self.components * (1 + self.n_features + self.packed) * (4 if self.float32 else 8)

    def broadcast_bytes(self) -> int:
        """Weights, means, precision factors (K x d x d) and the shared mask, as float64."""
        K, d = self.components, self.n_features
        return 8 * K * (3 + d + d * d)

    def client_bytes(self) -> int:
        """The mixture twice over (the broadcast and its factors as the E-step uses them), the statistics being
        summed, and a chunk's temporaries (models.mixture.gmm works in chunks of at most 2 MiB)."""
        return 2 * self.broadcast_bytes() + 2 * self.upload_bytes() + 4 * 2**20


def standardised_moments(count: np.ndarray, total: np.ndarray, sumsq: np.ndarray, mean: np.ndarray,
                         scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each device's mean and mean square of its standardised records, from its statistics-phase claims
    (count (n,), sum and sum of squares (n, d) of the transformed records) and the global standardisation:
    what its later uploads must add up to."""
    n = np.maximum(np.asarray(count, dtype=float), 1.0)[:, None]
    m1 = total / n
    return (m1 - mean) / scale, (sumsq / n - 2 * mean * m1 + mean**2) / scale**2


#: how far below zero the smallest eigenvalue of a component's moment matrix may fall, relative to its trace: float32
#: rounding of honest statistics stays below 1e-6
PSD_TOLERANCE = 1e-5


def moments_psd(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, d: int) -> np.ndarray:
    """Which uploads (n, K, ...) are statistics some records could have: for every component the moment matrix
    [[R, S1'], [S1, S2]] (of (1, x), responsibility-weighted) is positive semi-definite, within PSD_TOLERANCE of
    its trace. Sums and diagonals alone let an upload carry a second moment no records have (a large
    off-diagonal entry), which the M-step would turn into a covariance that is not one."""
    n, K = R.shape
    # [R, S1, S2] is the packed upper triangle of each component's moment matrix of (1, x)
    packed = np.concatenate([np.asarray(R, float)[..., None], np.asarray(S1, float), np.asarray(S2, float)], axis=-1)
    finite = np.isfinite(packed).all(axis=(1, 2))
    if not finite.all():
        return finite
    live = (packed != 0).any(axis=-1)  # an empty component is the moments of no records: nothing to check
    shifted = triu_unpack(packed[live], d + 1)
    diagonal = np.arange(d + 1)
    floor = PSD_TOLERANCE * np.maximum(np.trace(shifted, axis1=-2, axis2=-1), 1e-12)
    shifted[:, diagonal, diagonal] += floor[:, None]
    try:  # every eigenvalue above -floor: M + floor I is positive definite (one batched Cholesky)
        np.linalg.cholesky(shifted)
        return np.ones(n, bool)
    except np.linalg.LinAlgError:  # some upload is not (or is at the edge): decide each exactly
        ok = np.ones((n, K), bool)
        ok[live] = np.linalg.eigvalsh(triu_unpack(packed[live], d + 1))[:, 0] >= -floor
        return np.asarray(ok.all(axis=1))


def merge_labels(R: np.ndarray, S1: np.ndarray, K: int, rng: np.random.Generator) -> np.ndarray:
    """The component (of K) each cluster merges into: weighted k-means on the cluster means."""
    return kmeans(S1 / R[:, None], K, rng, weights=R)[1]
