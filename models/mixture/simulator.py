"""In-process federated mixture training: the statistics phase, the rounds and the threshold phase as the
coordinator and the agents run them (the same functions), for `fedsentry simulate pca --detector gmm`,
`bench pca` and the demo's comparison.

Each device holds out a share of its records (`models.detection.threshold.holdout_mask`): the mixture is fitted on the
rest, and the label-free threshold is read from the held-out records' scores. A mixture with many components
fits its own training records more closely than new normal traffic, so a quantile of training scores would
flag more new normal traffic than the quantile promises.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from models.core.aggregation import winsorized_weighted_mean
from models.core.federated import State
from models.core.rounds import BatchedPool, Hooks, RoundResult, Rounds, simulate
from models.core.sampling import fleet_names, listed, per_round
from models.detection.attacks import NO_ADVERSARIES, PRIVATE_ATTACKS, Adversaries
from models.detection.metrics import detection_report
from models.detection.preprocessing import RECORD_DTYPE, as_device_records, signed_log1p
from models.detection.screening import Guard, WeightCaps, admitted_histograms, fleet_tail
from models.detection.threshold import EDGES, Tail, holdout_mask, shrunk_threshold, sparse_histogram
from models.mixture import FEDERATED
from models.mixture.anchors import ANCHORS
from models.mixture.coarse import merged
from models.mixture.component_ridges import assemble, fleet_choice
from models.mixture.component_tails import ComponentTails, cross_fitted
from models.mixture.detector import MixtureDetector, fit_em
from models.mixture.fedem import FedEM, colluders, device_seed, shared_of
from models.mixture.gmm import Mixture, e_step, hard_stats, m_step, nearest
from models.mixture.ridges import combine, tail_scales
from models.mixture.spec import MixtureJobSpec
from models.mixture.summed import GROW, SummedFedEM
from models.pca.simulator import ClientData, prepare_clients

if TYPE_CHECKING:
    from models.detection.private import Clients
    from models.private.accounting import Budget
    from models.private.transport import SecureTransport


def split_holdout(parts: list[np.ndarray], share: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
    masks = [holdout_mask(len(p), share) for p in parts]
    return [p[~m] for p, m in zip(parts, masks)], [p[m] for p, m in zip(parts, masks)]


def device_data(X: list[np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """The algorithm's client data for a list of devices (as a batch): their standardised records, and the
    seed of their own clustering (from the job's seed and the device's position, or above the switch its id, as an
    agent computes it)."""
    data = np.empty(len(X), dtype=object)
    for i, x in enumerate(X):
        data[i] = np.asarray(x, dtype=RECORD_DTYPE)  # as a device holds its standardised records
    who: list[int] | list[str] = list(range(len(X))) if listed(len(X)) else fleet_names(len(X))
    return {"X": data, "seed": np.array([device_seed(seed, w) for w in who])}


def simulate_mixture(
    train_parts: list[np.ndarray],
    X_test: np.ndarray,
    y_test: np.ndarray,
    feature_names: list[str],
    algorithm: str = "fedem",
    rounds: int = 100,
    fraction: float = 0.1,
    quantile: float = MixtureJobSpec.quantile,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    holdout: float = MixtureJobSpec.holdout,
    on_round: Callable[[dict[str, float]], None] | None = None,
    guard: Guard | None = None,
    test_devices: np.ndarray | None = None,
    adversaries: Adversaries = NO_ADVERSARIES,
    private: bool = False,
    dropout: float = 0.0,
    dp: Budget | None = None,
    clear: bool = False,
    support_proofs: bool = False,
) -> dict[str, Any]:
    """Train a mixture on partitioned training records (federated, or "centralized": pooled EM) and
    evaluate it on labelled test records at the label-free threshold.

    private: the coordinator sees only each round's secure sum (models.mixture.summed, models.private.transport),
    with `dropout` of each round's devices vanishing after they uploaded.
    clear: private mode's sums taken in the clear (float64, no masks, no fixed point): its computation without the
    secure sum's rounding (benchmarks/private_same_model.py --rounding measures what that rounding moves).

    dp: differential privacy at this budget (models.private.dp): the summed FedEM's sums with Gaussian noise, each
    device's share added before masking in private mode, the whole noise added by the coordinator otherwise.

    Each device scores with the fleet's components and its own (models.mixture.detector.personalise): its
    held-out records for the threshold, as the agents do, and the test records it sees, `test_devices[j]`
    the device that sees test record j (-1 or None: a device with no components of its own). The result
    gives each device's false-positive rate on its normal test records (min, median, max).

    adversaries: the first devices and their attack (models.detection.attacks; their records, for a data attack, are
    already in `train_parts`); every phase checks what they send as the coordinator does.

    support_proofs: private mode's support rows proven 0/1 (models.private.proven): each device commits to its row
    with bit proofs, checked on arrival, and every secure sum is checked against the commitments after unmasking
    (a sum that does not match moves no support count); the result's `support_proofs` counts both."""
    guard = guard or MixtureJobSpec(features=list(feature_names)).guard()
    train_parts = [as_device_records(p) for p in train_parts]  # as the devices' buffers hold them
    fit_parts, held_parts = split_holdout(train_parts, holdout)
    clients: ClientData | Clients = prepare_clients(fit_parts, feature_names, guard=guard, adversaries=adversaries)
    d = len(feature_names)
    params = dict(params or {})
    summed = private or dp is not None  # the coordinator learns sums only (secure, or noisy, or both)
    mode = "private mode" if private else "differential privacy"
    if summed and algorithm != "fedem":
        raise ValueError(f"{mode} trains fedem, not {algorithm}")
    if support_proofs and (not private or clear or dp is not None):
        raise ValueError("support proofs check private mode's masked support rows: add --private, without "
                         "--dp-epsilon (noise in the rows cannot match their commitments) or its sums in the clear")
    if adversaries.on(PRIVATE_ATTACKS) and not private:
        raise ValueError(f"--attack {adversaries.attack} lies in a masked support row: private mode's (--private)")
    if summed and per_round(len(train_parts), fraction) < 2:
        raise ValueError(f"{mode} sums at least 2 devices a round: raise the share sampled (--fraction) or the "
                         "devices")
    if algorithm == "centralized":
        alg = FedEM(d, **params)
    else:
        # the job's rounds and share sampled bound the swaps, as a job's do (MixtureJobSpec.problem)
        job: dict[str, Any] = {"rounds": rounds, "fraction": fraction}
        alg = SummedFedEM(d, **params, **job) if summed else {**FEDERATED, **ANCHORS}[algorithm](d, **params, **job)
    transport = None
    if summed:
        from models.detection.private import largest_weight, private_clients
        from models.mixture.summed import summed_transport

        assert isinstance(alg, SummedFedEM)
        transport = summed_transport(largest_weight(clients.caps, clients.claimed), seed, dropout,
                                     float(np.max(clients.claimed)), alg.splits)
        transport.secure = private and not clear
        if dp is not None:  # noisy sums (models.mixture.noisy): no swaps, fewer seeding rounds, clipped uploads
            from models.mixture.noisy import noisy_scales

            transport.noise, alg.mass_floor = mixture_noise(alg, dp, len(train_parts), fraction, rounds, private,
                                                            seed)
            transport.scales, transport.clip = noisy_scales(alg), 1.0  # every device weighs 1
        clients = private_clients(fit_parts, feature_names, guard, transport)
        if support_proofs:
            from models.private.proven import ProvenRows

            transport.proven = ProvenRows("dH", alg.components * alg.split_factor, f"simulation-{seed}")
            if adversaries.on("support-nonbit"):  # they commit to the non-bits they mask (no proof verifies)
                transport.proven.as_is = frozenset(range(adversaries.count))
    out: dict[str, Any] = {"algorithm": algorithm, "components": alg.components, "reg": alg.reg}
    t0 = time.perf_counter()
    if summed and alg.ridges:
        raise ValueError(f"{mode} trains one ridge: leave out the further ridges (--ridges)")
    if summed and alg.anneal:
        raise ValueError(f"{mode} makes its k-means rounds on sums: leave out the annealing (--anneal)")
    if summed and alg.component_ridges:
        raise ValueError(f"{mode} trains one ridge: leave out the components' ridges (--component-ridges)")
    if summed and alg.component_tails != "none":
        raise ValueError(f"{mode} sums the threshold's histograms only: leave out the components' tails "
                         "(--component-tails)")
    if algorithm == "centralized" and alg.component_ridges:
        raise ValueError("the components' ridges are chosen from the fleet's held-out records: federated only")
    if algorithm == "centralized":
        T = np.vstack(clients.X)
        mixture = fit_em(T, alg.components, alg.reg, np.random.default_rng(seed), hard_iter=alg.hard_rounds)
        history: list[dict[str, float]] = [{"round": 1}]
        shared, wide = None, []
        if alg.ridges:  # the M-step of the last iteration's statistics (k-means or E-step) at every ridge
            stats = hard_stats(T, nearest(T, mixture.means), alg.components) if alg.hard_rounds >= 100 else \
                e_step(T, mixture)[:3]
            mixture, wide = m_step(*stats, alg.reg), [m_step(*stats, r) for r in alg.ridges]
        out.update(rounds=1, seconds_per_round=time.perf_counter() - t0, upload_bytes_per_client_round=None)
    else:
        mixture, shared, history, wide = run_mixture(alg, clients.X, clients.claimed, rounds, fraction, seed, on_round,
                                               adversaries, clients.caps, transport)
        # what every device sent in the seeding and the rounds (the phases are added below)
        answers = sum(h["devices"] for h in history)
        sent = sum(b * h["devices"] for b, h in zip(transport.sent, history)) if transport else \
            answers * alg.upload_bytes() + len(clients.X) * 8 * (1 + 2 * d)  # (plaintext statistics phase)
        out.update(rounds=rounds, seconds_per_round=(time.perf_counter() - t0) / rounds,
                   upload_bytes_per_client_round=alg.upload_bytes(), rejected_uploads=int(history[-1]["rejected"]),
                   swaps=int(history[-1]["swaps"]),
                   all_device_rounds=len(history) - rounds, private=private)
        if transport is not None and transport.secure:
            out["secure_sum"] = {"device_cpu_seconds_max": float(np.max(transport.device_cpu)),
                                 "coordinator_cpu_seconds_median": float(np.median(transport.server_cpu)),
                                 "dropout": dropout, "clipped_values": transport.clipped}
        if transport is not None and transport.proven is not None:
            out["support_proofs"] = transport.proven.report()
        if summed:  # the support counts at the end: each component's summed supporters, added up
            out["supporters_counted"] = float(history[-1].get("supporters", 0.0))
    histogram_bytes: list[int] = []  # what the devices send in each threshold phase (and the ridges' phase)
    if alg.component_ridges:  # one more phase: each component's ridge from the fleet's held-out records
        held = [clients.preprocessor.transform(h) for h in held_parts if len(h)]
        choice = fleet_choice(held, wide, alg.ridge_criterion, quantile, alg.min_cluster)
        mixture, wide = assemble(mixture, wide, choice), []
        histogram_bytes.append(len(held) * 8 * alg.components * (1 + len(alg.component_ridges)))
        out["component_ridges"] = np.bincount(choice, minlength=len(alg.component_ridges)).tolist()
    det = MixtureDetector.from_model(mixture, clients.preprocessor, 1.0, shared, wide=wide, quantile=quantile,
                                      reg=alg.reg, scoring=alg.scoring)
    if alg.coarse:  # the fleet's components merged (no extra round): a second score, calibrated below
        fleet = det.shared_
        det.with_coarse(merged(Mixture(mixture.weights[fleet] / mixture.weights[fleet].sum(), mixture.means[fleet],
                                       mixture.prec_chol[fleet]), alg.coarse, seed))
    # the fleet's components and the device's own (from the records it trained on, not those held out)
    devices = [copy.copy(det).personalise(p) for p in fit_parts]

    def tail_of(scores: list[np.ndarray]) -> tuple[float, Tail]:
        """The fleet's threshold and tail from the devices' histograms of their held-out records' scores."""
        histograms = adversaries.histograms([sparse_histogram(s) for s in scores], len(EDGES) - 1)
        histogram_bytes.append(sum(8 * len(b) for b, _ in histograms))
        if transport is not None:  # private: secure sums of the devices' histograms, each device clipping its own
            from models.detection.private import private_tail

            return private_tail(histograms, clients.weight, quantile, holdout, transport,
                                (guard.device_trim, colluders(alg.min_support)))
        kept, weight = admitted_histograms(histograms, [len(s) for s in scores], clients.weight)
        return fleet_tail(kept, weight, quantile, guard.device_trim, holdout, colluders(alg.min_support))

    if det.n_scores > 1:  # each score's tail (a threshold phase), then the combined score's (models.mixture.ridges)
        each = [dev.mixture_scores(h) for dev, h in zip(devices, held_parts)]
        scales = tail_scales([tail_of([e[j] for e in each]) for j in range(det.n_scores)], quantile)
        for x in (det, *devices):
            x.calibrate(scales)
        out["ridge_scales"] = scales.tolist()
    if alg.component_tails != "none":  # one more phase: each device's histograms of held-out scores per component
        raw = [np.asarray(dev.score_samples(h)) for dev, h in zip(devices, held_parts)]
        where_held = [dev.best_components(h) for dev, h in zip(devices, held_parts)]
        tails, scores = cross_fitted(raw, where_held, alg.components, quantile)
        histogram_bytes.append(ComponentTails.upload_bytes(where_held, raw))
        both = tail_scales([tail_of(raw), tail_of(scores)], quantile) if alg.component_tails == "both" else None
        for x in (det, *devices):
            x.component_tails_, x.tails_scales_ = tails, both
        if both is not None:  # the smaller tail probability of the two (models.mixture.ridges.combine)
            scores = [combine(np.vstack([r, c]), both) for r, c in zip(raw, scores)]
    else:
        scores = [np.asarray(dev.score_samples(h)) for dev, h in zip(devices, held_parts)]
    threshold, det.tail_ = tail_of(scores)
    det.threshold_ = threshold
    if transport is not None and transport.noise is not None:
        from models.private.accounting import report

        out["dp"] = report(transport.noise.ledger, dp)  # type: ignore[arg-type]
    if algorithm != "centralized":  # per device and round: the statistics and threshold phases count as rounds
        sent += transport.phase_bytes if transport else sum(histogram_bytes)
        device_rounds = len(clients.X) * (len(history) + 1 + len(histogram_bytes))
        out["upload_bytes_per_device_round"] = sent / device_rounds
        if transport is not None:
            out["upload_bytes_by_step"] = transport.per_step(device_rounds)
    own = np.array([shrunk_threshold(s, threshold, det.tail_, quantile) for s in scores])  # as each device sets it
    where = np.full(len(X_test), -1) if test_devices is None else np.asarray(test_devices)
    test_scores = np.empty(len(X_test))
    for i in np.unique(where):
        seen = where == i
        test_scores[seen] = (det if i < 0 else devices[i]).score_samples(X_test[seen])
    at = np.where(where < 0, threshold, own[np.maximum(where, 0)])  # each test record at its device's threshold
    fleet_only = detection_report(y_test, test_scores, threshold)
    # the mixture's own negative log-likelihood, whatever the score (several ridges, scorings, tails)
    nll_scores = [dev.mixture_scores(h)[0] for dev, h in zip(devices, held_parts)] \
        if det.n_scores > 1 or det.component_tails_ is not None else scores
    out.update(history=history, threshold=threshold, holdout_nll=heldout_nll(det, nll_scores, clients.weight, guard),
               shared_components=int(det.shared_.sum()),
               device_threshold={"prior": det.tail_.prior, "min": float(own.min()), "median": float(np.median(own)),
                                 "max": float(own.max()), "each": own.tolist()},
               device_false_positive_rate=device_rates(test_scores > at, where, y_test, len(devices)),
               fleet_threshold={"recall": fleet_only["recall"], "false_positive_rate":
                                fleet_only["false_positive_rate"], "f1": fleet_only["f1"],
                                "device_false_positive_rate": device_rates(test_scores > threshold, where, y_test,
                                                                           len(devices))},
               **detection_report(y_test, test_scores, at))
    out["detector"] = det
    return out


def mixture_noise(alg: SummedFedEM, dp: Budget, fleet: int, fraction: float, rounds: int, distributed: bool,
                  seed: int) -> tuple[Any, float]:
    """A mixture job's Gaussian noise, calibrated to the budget for its sums (models.mixture.noisy.plan), and the
    mass a component needs (`noisy_rounds`)."""
    from models.mixture.noisy import noisy_rounds, plan
    from models.private.accounting import ledger_for

    planned, q = plan(alg, fleet, fraction, rounds)
    noise = noisy_rounds(alg, ledger_for(dp, planned, fleet, q, distributed, seed))
    return noise, alg.mass_floor


def device_rates(flagged: np.ndarray, where: np.ndarray, y_test: np.ndarray, devices: int) -> dict[str, Any] | None:
    """The spread over devices of their false-positive rates on the normal test records each sees (min,
    median, max), with how many devices had more than 3 % and how many normal records the median device saw
    (one false positive among 30 records is already 3.3 %).

    How many devices exceed 3 % by chance alone: `above_3_percent_by_chance` is the number expected if every device
    had the fleet's own rate on the records it saw (each device's count binomial), and `significantly_above_3_percent`
    the devices whose count a one-sided binomial test finds above 3 % (family-wise 5 %, Bonferroni over the
    devices): the devices whose own rate is shown to be above 3 %, not merely seen above it."""
    from scipy.stats import binom

    normal = np.asarray(y_test) == 0
    seen = np.bincount(where[normal & (where >= 0)], minlength=devices)
    wrong = np.bincount(where[normal & (where >= 0) & flagged], minlength=devices)
    n, k = seen[seen > 0], wrong[seen > 0]
    if not len(n):
        return None
    rates = k / n
    fleet = float(k.sum() / n.sum())
    by_chance = float(binom.sf(np.floor(0.03 * n), n, fleet).sum())  # P(count > 3 % of n) at the fleet's rate
    significant = int((binom.sf(k - 1, n, 0.03) < 0.05 / len(n)).sum())  # P(count >= k) at 3 %
    return {"min": float(rates.min()), "median": float(np.median(rates)), "max": float(rates.max()),
            "above_3_percent": int((rates > 0.03).sum()), "above_3_percent_by_chance": by_chance,
            "significantly_above_3_percent": significant, "normal_records_median": float(np.median(n))}


def devices_seeing(parts: list[np.ndarray], X_test: np.ndarray, y_test: np.ndarray, seed: int = 0,
                   first_honest: int = 0) -> np.ndarray:
    """Which device sees each test record, for an evaluation that scores as the devices do: a normal record
    comes from the device whose training records hold its nearest neighbour (it is that device's kind of
    traffic; whatever the partition), an attack reaches a device drawn at random (the attacker does not pick
    the one device that holds its traffic as normal; with `first_honest`, one of the devices from there on: the
    rogues before it keep their own attacks normal, by construction). Nearest in signed-log1p units, a chunk at
    a time."""
    logged = [signed_log1p(p, np.ones(p.shape[1], bool)) for p in parts]
    pooled = np.vstack(logged)
    owner = np.repeat(np.arange(len(parts)), [len(p) for p in parts])
    scale = pooled.std(axis=0) + 1e-12
    P = pooled / scale
    p2 = (P**2).sum(axis=1)
    out = np.random.default_rng(seed + 7919).integers(first_honest, len(parts), len(X_test))
    normal = np.flatnonzero(np.asarray(y_test) == 0)
    T = signed_log1p(X_test[normal], np.ones(X_test.shape[1], bool)) / scale
    for i in range(0, len(T), 512):
        t = T[i: i + 512]
        out[normal[i: i + 512]] = owner[(p2[None, :] - 2 * t @ P.T).argmin(axis=1)]
    return out


def run_mixture(alg: FedEM, X: list[np.ndarray], claimed: np.ndarray, rounds: int, fraction: float, seed: int,
                on_round: Callable[[dict[str, float]], None] | None = None,
                adversaries: Adversaries = NO_ADVERSARIES, caps: WeightCaps | None = None,
                transport: SecureTransport | None = None) -> tuple[Mixture, np.ndarray, list[dict[str, float]],
                                                                   list[Mixture]]:
    """The rounds of a federated mixture job: the seeding round with every device (as the job's seed phase; a
    summed FedEM's seeding rounds, as many as it grows), then `rounds` rounds of the coordinator's sampling and the
    devices' client steps (the adversaries' uploads tampered with, models.detection.attacks). The answers weigh the
    records each device claimed, capped in the pipeline by `caps` (as they are, without); a summed FedEM's devices
    cap their own, and the server receives their secure sum (`transport`)."""
    rng = np.random.default_rng(seed)
    chaos = np.random.default_rng(seed + 7919)  # attacks do not disturb the sampling
    loop = Rounds.start(alg, len(X), fraction, rng)
    if not isinstance(alg, SummedFedEM):  # a private job's coordinator has no device's moments to check against
        loop.server = alg.attach_bounds(loop.server, *device_moments(X))
    if caps is not None:
        loop.server.update(caps.state())
    summed = isinstance(alg, SummedFedEM)
    if isinstance(alg, SummedFedEM):
        loop.broadcast = alg.with_caps(loop.server, loop.broadcast)
    pool = BatchedPool.of(alg, {**device_data(X, seed), "claimed": np.asarray(claimed, dtype=float)}, loop.broadcast)
    history: list[dict[str, float]] = []

    def tamper(idx: np.ndarray, broadcast: State) -> Callable[[State], State] | None:
        return adversaries.tamper(adversaries.among(idx), broadcast, chaos)

    def observe(idx: np.ndarray, done: RoundResult) -> None:
        entry = {"round": len(history), "rejected": float(done.server["rejected"]), "devices": float(len(idx)),
                 "swaps": float(done.server.get("swaps", 0)),  # made so far (models.mixture.swaps)
                 **({"supporters": float(np.sum(done.server["support"])),  # the summed support counts, added up
                     "withheld": float(done.server.get("withheld", 0))} if summed else {}),  # sums failing their check
                 "train_nll": float(np.mean(done.states["nll"])) if int(done.broadcast["stage"]) == 1 else float("nan")}
        history.append(entry)
        if on_round:
            on_round(entry)

    proven = transport.proven if transport is not None else None

    def merges(ids: np.ndarray, loop: Rounds) -> None:  # both sides of the proofs make the job's merges
        assert proven is not None
        proven.sync(loop.broadcast.get("merges", np.zeros((0, 2))))

    hooks = Hooks(tamper=tamper, observe=observe, receive=transport, before=merges if proven is not None else None,
                  counted=transport.counted if transport is not None else None)  # a refused device keeps its state
    if summed or alg.seeding == "grow":  # seeding rounds of every device while the mixture grows
        simulate(loop, pool, claimed, rounds, hooks, everyone_while=lambda b: int(b["stage"]) == GROW)
    else:
        simulate(loop, pool, claimed, rounds, hooks, everyone_first=True)
    return alg.consensus(loop.broadcast), shared_of(loop.broadcast), history, alg.widened(loop.server)


def device_moments(X: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each device's mean and mean square of its standardised records (what the statistics phase tells the
    coordinator, `models.mixture.fedem.standardised_moments`)."""
    d = X[0].shape[1]
    means = np.stack([x.mean(axis=0) if len(x) else np.zeros(d) for x in X])
    squares = np.stack([(x**2).mean(axis=0) if len(x) else np.zeros(d) for x in X])
    return means, squares


def heldout_nll(det: MixtureDetector, scores: list[np.ndarray], weight: np.ndarray, guard: Guard) -> float:
    """The held-out records' mean negative log-likelihood as the job records it (each device's mean, a
    winsorised weighted mean over devices; lower is better): what compares mixtures without labels."""
    held = np.array([len(s) > 0 for s in scores])
    means = np.array([float(np.mean(s)) + det.floor_ for s, h in zip(scores, held) if h])
    return float(winsorized_weighted_mean(means[:, None], weight[held], guard.device_trim)[0])


#: the ridges label-free model selection compares (standardised units)
SELECTION_RIDGES = (1e-4, 1e-3, 1e-2, 0.1, 0.3)


def select_mixture(train_parts: list[np.ndarray], X_test: np.ndarray, y_test: np.ndarray, feature_names: list[str],
                   ridges: tuple[float, ...] = SELECTION_RIDGES, params: dict[str, Any] | None = None,
                   **settings: Any) -> dict[str, Any]:
    """Model selection without labels: train one federated mixture per ridge and keep the one whose held-out
    records are likeliest (lowest `holdout_nll`, which a job records with its model). The test labels only
    evaluate; the returned ``selection`` lists every candidate."""
    runs = [simulate_mixture(train_parts, X_test, y_test, feature_names, params={**(params or {}), "reg": r},
                             **settings) for r in ridges]
    best = min(runs, key=lambda r: r["holdout_nll"])
    best["selection"] = [{k: r[k] for k in ("reg", "components", "holdout_nll", "auc_roc", "f1", "recall",
                                            "false_positive_rate")} for r in runs]
    return best

