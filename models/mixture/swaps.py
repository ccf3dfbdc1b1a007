"""Split-and-merge in the k-means rounds, from the aggregated statistics alone (issue 21 points 3 and 4).

What it is for: a light component whose covariance spans far more volume than the others' (records on either side
of empty space, nearest to one mean) gives whatever falls in that space a normal score, an attack flood included
(benchmarks/results/stability.md). Lloyd's rounds do not leave such a local optimum; a swap (Ueda et al.'s SMEM,
and the ELBG of Patane and Russo 2001, for k-means) moves a component from where it is least needed to where it is:

- split: the component of least peak density (log pi_k - 1/2 log det Sigma_k, the ridge included) among those
  whose records can give each half `least` (the job's min_cluster: the ridge keeps a half of fewer than d + 1
  records non-singular), whose halves keep its supporters (`keeps_support`: a split that leaves every supporting
  device below the support share in each half takes that traffic out of the fleet's model and out of each device's
  own components) and whose spread (det^(1/d)) is at least SPREAD^2 times the median component's, in two
  along its principal axis (means mu -+ half the standard deviation there, as LBG splits);
- merge: to free a component for it, the pair of components (each with its NEIGHBOURS nearest means) whose merging
  loses the least log-likelihood under a Gaussian of each (the pair's moments are the sum of theirs: exact),
  neither of them the one split. An empty component costs nothing to merge.

The merge is made in the server's table of control variates itself (each device's row: column a += column b, b
emptied; the sums re-read from the table), so the aggregate stays the statistics of every device's last upload
and each row still adds up to its device's moments; the coordinator stores every row after such a round
(FedEM.touched). The split is made in the broadcast only: the next k-means rounds' devices assign their records
to the two new means, their rows replace the stale ones, and the stale rows keep the whole component in the first
half until their devices answer again. A component with no mass yet (the new half, while no device holding its
records has answered) keeps its last broadcast mean (`hold_empty`) instead of falling to the pooled moments; with
swaps on, this holds in every round, the EM rounds after `hard_rounds` included (an emptied component keeps its place
there too, as it does in the k-means rounds).

When: a swap every SPLIT_EVERY k-means rounds, the last one ending 1 / fraction rounds before the job's last (each
device answers once after it, on average): 18 swaps in 100 rounds at 10 %, 5 in a job's default 30 rounds at 30 %.
No extra round, no extra upload, no record leaves a device; the server's step in a swap round adds the pairs'
log-determinants (K x NEIGHBOURS / 2 of them, d x d) and a pass over two columns of the table.

Measured (`fedsentry bench detection`, 45 runs against the same runs without swaps, `--splits 0`;
benchmarks/results/stability.md): median caught +2.9 points on synthetic, +2.4 on nsl-kdd, +6.5 on ton-iot,
least / median 0.95 -> 0.96, 0.85 -> 0.94, 0.74 -> 0.77.

Private mode (models.mixture.summed) decides each swap the same way (`plan`: the aggregated statistics are all it
reads, and a summed server has them), and makes the merge where the statistics are held: in its running sums, and
on each device in the contribution it last made (its control variate), which it merges before its next difference
(the broadcast lists every merge of the job; `merge_columns`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.core.federated import State
from models.mixture import control, heaviest
from models.mixture.gmm import Mixture, m_step, nearest_psd, precision_cholesky, triu_unpack

#: k-means rounds between two swaps (a swap's split settles as its devices' rows are renewed)
SPLIT_EVERY = 5
#: a component splits only if its spread (geometric mean of its covariance's eigenvalues, as standard deviations)
#: is at least this many times the median component's
SPREAD = 2.0
#: each component's merge partners: its nearest means
NEIGHBOURS = 6


def last_swap(rounds: int | None, fraction: float | None) -> int | None:
    """The last round a swap may end in a job of `rounds` rounds sampling `fraction` of the devices: early enough
    that every device answers once, on average, after it (1 / fraction rounds); None when either is unknown."""
    if rounds is None or fraction is None:
        return None
    return int(rounds) - int(np.ceil(1 / float(fraction)))


def swaps_allowed(splits: int | None, last: int | None) -> int:
    """The most swaps: `splits`, or (None) as many as the job's rounds leave room for (none where they are not
    known)."""
    if splits is not None:
        return int(splits)
    return max(0, last // SPLIT_EVERY) if last is not None else 0


def swap_due(em_round: int, splits: int, last: int | None = None) -> bool:
    """Whether a k-means round (its number since seeding) ends with a swap: every SPLIT_EVERY rounds, `splits`
    times, none after round `last`."""
    return splits > 0 and em_round % SPLIT_EVERY == 0 and em_round // SPLIT_EVERY <= splits and \
        (last is None or em_round <= last)


def moments(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, reg: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per component its mean, covariance (ridge included) and the covariance's log-determinant; components
    without mass get zeros and a log-determinant of -inf."""
    d = S1.shape[1]
    mass = np.asarray(R, dtype=float)
    live = mass > 1e-12 * mass.sum()
    Rs = np.where(live, R, 1.0)[:, None]
    means = np.where(live[:, None], S1 / Rs, 0.0)
    second = np.where(live[:, None, None], triu_unpack(S2, d) / Rs[..., None], np.eye(d))
    covs = nearest_psd(second - means[:, :, None] * means[:, None, :]) + reg * np.eye(d)
    return means, covs, np.where(live, np.linalg.slogdet(covs)[1], -np.inf)


def split_target(R: np.ndarray, logdet: np.ndarray, records: np.ndarray, least: int, d: int,
                 support: np.ndarray | None = None) -> int | None:
    """The component to split (module docstring), or None. With the support counts (`support`: devices holding
    SUPPORT_SHARE of their records in each component), a component whose halves cannot keep its supporters
    (`keeps_support`) is not split."""
    live = np.isfinite(logdet)
    if live.sum() < 2:
        return None
    broad = logdet >= np.median(logdet[live]) + 2 * d * np.log(SPREAD)
    ok = live & broad & (records >= 2 * least - 0.5)
    if support is not None:
        ok &= keeps_support(R, support)
    if not ok.any():
        return None
    peak = np.where(ok, np.log(np.maximum(R, 1e-300) / R.sum()) - 0.5 * logdet, np.inf)
    return int(np.argmin(peak))


def keeps_support(R: np.ndarray, support: np.ndarray) -> np.ndarray:
    """Per component, whether each half of a split keeps, on average over the devices supporting it, the share of
    their records that support needs (control.SUPPORT_SHARE): its mass (in devices: a device of the federation's mean
    size weighs 1) over its supporters, halved. A split that leaves each supporter fewer records than that in either
    half takes the traffic out of the fleet's model (no half is supported: issue 23's 11-device regression, where such
    halves' held-out records scored above 40,000 and raised the threshold) and out of each device's own components
    (models.mixture.detector.personalise). A component without supporters may split."""
    R, support = np.asarray(R, dtype=float), np.asarray(support, dtype=float)
    return np.greater_equal(R / 2, control.SUPPORT_SHARE * support - 1e-12)


def merge_pair(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, reg: float, means: np.ndarray, logdet: np.ndarray,
               avoid: int) -> tuple[int, int]:
    """The pair (a, b) whose merging loses the least Gaussian log-likelihood (per unit of mass), avoiding one."""
    K = len(R)
    dist = ((means[:, None, :] - means[None, :, :]) ** 2).sum(axis=-1)
    np.fill_diagonal(dist, np.inf)
    dist[avoid, :] = dist[:, avoid] = np.inf
    near = np.argsort(dist, axis=1)[:, :NEIGHBOURS]
    pairs = np.unique(np.sort(np.stack([np.repeat(np.arange(K), near.shape[1]), near.ravel()], axis=1), axis=1),
                      axis=0)
    a, b = pairs[:, 0], pairs[:, 1]
    keep = np.isfinite(dist[a, b])
    a, b = a[keep], b[keep]
    if not len(a):
        raise ValueError("no pair of components to merge")
    _, _, joint = moments(R[a] + R[b], S1[a] + S1[b], S2[a] + S2[b], reg)
    Ra, Rb, Rab = R[a], R[b], R[a] + R[b]

    # (a component with mass below `moments`' live bar has a log-determinant of -inf, and so may the pair: -inf
    # minus -inf is nan there, replaced below, as such a component is free to merge)
    with np.errstate(divide="ignore", invalid="ignore"):
        gauss = 0.5 * (massed(Rab, joint) - massed(Ra, logdet[a]) - massed(Rb, logdet[b]))
        weights = massed(Ra, np.log(np.maximum(Rab, 1e-300) / np.maximum(Ra, 1e-300))) + \
            massed(Rb, np.log(np.maximum(Rab, 1e-300) / np.maximum(Rb, 1e-300)))
    cost = np.where(np.isfinite(logdet[a]) & np.isfinite(logdet[b]), gauss - weights, 0.0)  # an empty one: free
    cost = np.where(np.isnan(cost), np.inf, cost)
    j = int(np.argmin(cost))
    return int(a[j]), int(b[j])


def massed(mass: np.ndarray, per: np.ndarray) -> np.ndarray:
    """mass x per, 0 where there is no mass (whatever per is there: -inf, nan)."""
    return np.where(mass > 0, mass * np.where(mass > 0, per, 0.0), 0.0)


def merge_in_table(server: State, a: int, b: int) -> None:
    """Every device's row (and a step's devices without one): component b's statistics into a, b emptied; the
    sums of both re-read from the table; their support recounted; the heaviest rows read again."""
    n = int(server["rows"])
    W = server["W_rows"][:n]
    for name in control.STATS:
        table = server[f"{name}_rows"]
        table[:n, a] += table[:n, b]
        table[:n, b] = 0
        server[name][a] = np.tensordot(W, table[:n, a].astype(float), axes=1)
        server[name][b] = 0.0
        if f"{name}_extra" in server and float(server.get("extra", 0.0)):
            server[f"{name}_extra"][a] += server[f"{name}_extra"][b]
            server[f"{name}_extra"][b] = 0.0
    H = server["H_rows"]
    H[:n, a] = server["R_rows"][:n, a] >= control.SUPPORT_SHARE
    H[:n, b] = False
    server["support"][a], server["support"][b] = H[:n, a].sum(), 0.0
    heaviest.invalidate(server)


def split_in_broadcast(m: Mixture, covs: np.ndarray, k: int, b: int) -> Mixture:
    """The mixture with component k in two along its principal axis: k at mu - s/2, b at mu + s/2 (s its standard
    deviation there), each with half k's weight and k's covariance."""
    lam, V = np.linalg.eigh(covs[k])
    step = 0.5 * np.sqrt(max(lam[-1], 0.0)) * V[:, -1]
    weights, means, prec = m.weights.copy(), m.means.copy(), m.prec_chol.copy()
    means[b], means[k] = means[k] + step, means[k] - step
    weights[b] = weights[k] = m.weights[k] / 2
    prec[b] = precision_cholesky(covs[k: k + 1])[0]
    prec[k] = prec[b]
    return Mixture(weights / weights.sum(), means, prec)


def hold_empty(m: Mixture, R: np.ndarray, server: State) -> Mixture:
    """The mixture with each component that has no mass yet (a split's new half, until a device whose records
    are nearest to it answers) where the last broadcast had it, rather than at the pooled moments (where it would
    lose the split)."""
    mass = np.asarray(R, dtype=float)
    empty = mass <= 1e-6 * mass.sum()
    if not empty.any() or "last.means" not in server:
        return m
    means, prec = m.means.copy(), m.prec_chol.copy()
    means[empty], prec[empty] = server["last.means"][empty], server["last.prec_chol"][empty]
    return Mixture(m.weights, means, prec)


@dataclass(frozen=True)
class Swap:
    """One swap's decision: component k splits into k and b, after b merged into a (`covs`: the covariances k
    splits along, before the merge)."""

    k: int
    a: int
    b: int
    covs: np.ndarray


def plan(R: np.ndarray, S1: np.ndarray, S2: np.ndarray, reg: float, records_per_mass: float,
         least: int, support: np.ndarray | None = None) -> Swap | None:
    """What a swap does, from the aggregated statistics alone (module docstring; plaintext FedEM and private mode
    alike): None when no component is broad enough to split."""
    d = S1.shape[1]
    means, covs, logdet = moments(R, S1, S2, reg)
    k = split_target(R, logdet, R * records_per_mass, least, d, support)
    if k is None:
        return None
    a, b = merge_pair(R, S1, S2, reg, means, logdet, k)
    return Swap(k, a, b, covs)


def merge_columns(arrays: dict[str, np.ndarray], a: int, b: int, axis: int = 0) -> None:
    """Component b's column added into a's and emptied, in place, in each array (along `axis`, the components'):
    what a merge does to summed statistics, wherever they are held (private mode's sums, a device's contribution)."""
    for x in arrays.values():
        x = np.moveaxis(x, axis, 0)  # a view: the writes reach the array
        x[a] += x[b]
        x[b] = 0


def swap(server: State, reg: float, records_per_mass: float, least: int) -> Mixture | None:
    """One swap on the server's table (module docstring): the mixture to broadcast, or None when no component is
    broad enough to split (nothing changed)."""
    s = plan(*control.aggregate(server), reg, records_per_mass, least, control.devices_and_support(server)[1])
    if s is None:
        return None
    merge_in_table(server, s.a, s.b)
    server["swapped"] = np.array(1)
    server["swaps"] = np.array(int(server.get("swaps", 0)) + 1)  # how many this job made
    return split_in_broadcast(m_step(*control.aggregate(server), reg), s.covs, s.k, s.b)
