"""Attacks by devices, for measuring what the checks and the support rule withstand (simulation, tests,
`fedsentry simulate pca --adversaries K --attack NAME`, `fedsentry bench robustness`).

The adversaries are the first K devices of a fleet. Each attack acts in one phase of a job, where the device
has something to tell the coordinator:

- data: ``compliant`` trains honestly on its normal records plus attack records and uploads true statistics
  (models.mixture.rogues);
- statistics: ``inflate`` holds the compliant rogue's records and claims the largest record count the
  statistics phase admits (``Guard.max_records``, its sums scaled alike so its moments stay true): volume;
- rounds: ``max-variance`` puts the device's whole variance on one direction (every feature's variance as
  claimed, so within the diagonal, trace and PSD checks: a rank-one covariance some records could have);
  ``non-psd`` adds a large off-diagonal entry (+1e4) to its second moments, diagonal and sums unchanged
  (no records have them: the PSD checks must refuse it and the round go on); ``random``, ``scaled`` and
  ``rotated`` replace the honest upload (`poison`);
- threshold: ``threshold`` puts its whole error histogram, of exactly the records it claimed, in the top bin;
- private mode only (`PRIVATE_ATTACKS`, not in the robustness table: plaintext sees no masked row):
  ``support-inflate`` holds the compliant rogue's records and masks INFLATE times its support row's change (a
  private mixture's ``dH``), so that the summed row counts it INFLATE times as a supporter of every component it
  supports (its attack traffic's among them: alone, it passes the support count); the bit proofs
  (models.private.proven, ``--support-proofs``) are what stands against it. ``support-nonbit`` holds the same
  records and masks NONBIT times its support row's change, committing to what it masks as it is: an entry that
  changes is then -1 or 2, which no bit proof holds. With the proofs it is refused on arrival at each sum where its
  row changes (keeping its state as before it, as an agent does) and counted at the others; without them its
  changes count NONBIT times.

Detectors differ in what they upload: a mixture's per-component statistics (R, S1, S2 per record) are
tampered with as uploads, a PCA device's second moment C_i before its client step (FedPG and FedPE upload a
basis computed from it, FedMM the product C_i Q, which the server checks). `not_applicable` says which
combinations mean nothing: an algorithm declares the attacks its uploads make meaningless (`not_attacked`, an
attack -> why), so that this catalogue names no family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from models.core.federated import State, take
from models.core.linalg import orth

#: every attack, in the order the robustness table lists them
ATTACKS = ("compliant", "inflate", "max-variance", "non-psd", "threshold", "random", "scaled", "rotated")
#: attacks on what only private mode's masked sums carry (the robustness table's ATTACKS are plaintext's too)
PRIVATE_ATTACKS = ("support-inflate", "support-nonbit")
#: what support-inflate multiplies its support row's change by
INFLATE = 5.0
#: what support-nonbit multiplies its support row's change by (an entry that changes is then -1 or 2: no bit)
NONBIT = 2.0
#: attacks that replace the honest upload (`poison`)
POISONS = ("random", "scaled", "rotated")
#: attacks whose devices hold the compliant rogue's records (models.mixture.rogues)
ROGUE_DATA = ("compliant", "inflate", *PRIVATE_ATTACKS)
#: attacks on a device's second moments or uploads during the training rounds
ROUND_ATTACKS = ("max-variance", "non-psd", *POISONS)
#: what non-psd adds to one off-diagonal entry of a second moment (standardised units)
OFF_DIAGONAL = 1e4


def not_applicable(attack: str, algorithm: str, cls: type | None) -> str | None:
    """Why an attack means nothing for this algorithm (its class; None: a baseline, which runs no federation), or
    None."""
    if attack not in (*ATTACKS, *PRIVATE_ATTACKS):
        return f"unknown attack {attack!r}; choose from {', '.join((*ATTACKS, *PRIVATE_ATTACKS))}"
    if cls is None and attack not in ROGUE_DATA:
        return f"{attack} tampers with what a device sends, and --algorithm {algorithm} has no federation"
    why = getattr(cls, "not_attacked", {}).get(attack)  # a FederatedAlgorithm's; other classes have none
    return why.format(algorithm=algorithm) if why else None


def poison(uploads: State, broadcast: State, kind: str, rng: np.random.Generator) -> State:
    """Each upload replaced by ``random`` noise of its size, ``scaled`` by 1000, or ``rotated`` (PCA: its size,
    spanning only directions orthogonal to the current consensus, to steer it away from the principal
    subspace)."""
    out = {}
    for name, X in uploads.items():
        norms = np.linalg.norm(X.reshape(len(X), -1), axis=1).reshape(-1, *([1] * (X.ndim - 1)))
        if kind == "random":
            N = rng.standard_normal(X.shape)
            out[name] = N / np.linalg.norm(N.reshape(len(N), -1), axis=1).reshape(norms.shape) * norms
        elif kind == "scaled":
            out[name] = 1000.0 * X
        elif kind == "rotated":
            basis = orth(next(iter(broadcast.values())))
            away = X - basis @ (np.swapaxes(basis, -1, -2) @ X)
            away += 1e-9 * rng.standard_normal(X.shape)
            out[name] = away / np.linalg.norm(away, axis=(-2, -1), keepdims=True) * norms
        else:
            raise ValueError(f"unknown attack {kind!r}; choose from {', '.join(POISONS)}")
    return out


@dataclass(frozen=True)
class Adversaries:
    """The first `count` devices of a fleet and their attack; each simulator asks it at each phase."""

    count: int = 0
    attack: str = "compliant"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.attack not in (*ATTACKS, *PRIVATE_ATTACKS):
            raise ValueError(f"unknown attack {self.attack!r}; choose from {', '.join((*ATTACKS, *PRIVATE_ATTACKS))}")
        if self.count < 0:
            raise ValueError(f"adversaries must be at least 0, got {self.count}")

    def on(self, attack: str | tuple[str, ...]) -> bool:
        return self.count > 0 and self.attack in ((attack,) if isinstance(attack, str) else attack)

    def summaries(self, summaries: list[tuple[int, np.ndarray, np.ndarray]],
                  max_records: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Statistics phase: inflate claims `max_records` records with the same mean and mean square."""
        if not self.on("inflate"):
            return summaries
        out = list(summaries)
        for i in range(min(self.count, len(out))):
            n, total, sumsq = out[i]
            f = max_records / max(n, 1)
            out[i] = (int(max_records), total * f, sumsq * f)
        return out

    def second_moments(self, C: np.ndarray) -> np.ndarray:
        """A PCA device's second moment C_i before its client step: max-variance makes it rank one along
        sqrt(diag C_i) with signs of the attacker's choosing (diagonal and trace as claimed, PSD); non-psd adds
        OFF_DIAGONAL at (0, 1) and (1, 0)."""
        if not self.on(("max-variance", "non-psd")):
            return C
        C = C.copy()
        k = min(self.count, len(C))
        if self.attack == "max-variance":
            v = np.sqrt(np.maximum(np.diagonal(C[:k], axis1=1, axis2=2), 0.0)) * self._signs(C.shape[-1])
            C[:k] = v[:, :, None] * v[:, None, :]
        else:
            C[:k, 0, 1] += OFF_DIAGONAL
            C[:k, 1, 0] += OFF_DIAGONAL
        return C

    def among(self, client_ids: np.ndarray) -> np.ndarray:
        """Which of these devices are adversaries."""
        return np.asarray(client_ids) < self.count

    def tamper(self, evil: np.ndarray, broadcast: State,
               rng: np.random.Generator) -> Callable[[State], State] | None:
        """The round's upload tampering (models.core.rounds.run_round's `tamper`) for the sampled devices flagged in
        evil: a poison for any detector, max-variance and non-psd for a mixture's statistics (a PCA device's
        are tampered with in `second_moments`)."""
        fake: Callable[[State], State]
        if not np.any(evil):
            return None
        if self.attack in POISONS:
            fake = partial(poison, broadcast=broadcast, kind=self.attack, rng=rng)
        elif self.attack in ("max-variance", "non-psd") and "pi" in broadcast:  # a mixture's broadcast
            fake = self._mixture_statistics
        elif self.attack == "support-inflate":
            fake = inflate_support
        elif self.attack == "support-nonbit":
            fake = nonbit_support
        else:
            return None

        def tamper(uploads: State) -> State:
            bad = fake(take(uploads, evil))
            out = {k: v.copy() for k, v in uploads.items()}
            for k in out:
                out[k][evil] = bad[k]
            return out
        return tamper

    def _mixture_statistics(self, up: State) -> State:
        """A mixture upload (R, S1, S2 per component, per record; S2 packed upper triangles) with all of it in
        the device's heaviest component. max-variance: that component's second moment is mu mu' + v v', v the
        square root of every feature's variance (the sums, and the diagonal of the second moments, as
        honest; PSD: the moments of mu + v z). non-psd: the honest upload with OFF_DIAGONAL added to the
        (0, 1) entry of that component's second moment."""
        R, S1, S2 = (np.asarray(up[k], dtype=float) for k in ("R", "S1", "S2"))
        d = S1.shape[-1]
        i, j = np.triu_indices(d)
        rows = np.arange(len(R))
        top = R.argmax(axis=1)
        if self.attack == "non-psd":
            S2 = S2.copy()
            S2[rows, top, 1] += OFF_DIAGONAL  # (0, 1) is the second entry of a packed upper triangle
            return {k: v.astype(up[k].dtype) for k, v in (("R", R), ("S1", S1), ("S2", S2))}
        total, first = R.sum(axis=1), S1.sum(axis=1)
        second = S2[..., i == j].sum(axis=1)
        w = np.maximum(total, 1e-300)[:, None]
        mu = first / w
        v = np.sqrt(np.maximum(second / w - mu**2, 0.0)) * self._signs(d)
        out = {"R": np.zeros_like(R), "S1": np.zeros_like(S1), "S2": np.zeros_like(S2)}
        out["R"][rows, top] = total
        out["S1"][rows, top] = first
        out["S2"][rows, top] = w * (mu[:, i] * mu[:, j] + v[:, i] * v[:, j])
        return {k: v.astype(up[k].dtype) for k, v in out.items()}

    def _signs(self, d: int) -> np.ndarray:
        """The direction's signs, one draw the adversaries share (colluding, they push the same way)."""
        return np.where(np.random.default_rng(self.seed + 4099).random(d) < 0.5, -1.0, 1.0)

    def histograms(self, histograms: list[tuple[np.ndarray, np.ndarray]],
                   n_bins: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Threshold phase: threshold puts every record a device claims in the top bin of the agreed grid."""
        if not self.on("threshold"):
            return histograms
        out = list(histograms)
        for i in range(min(self.count, len(out))):
            total = int(np.sum(out[i][1], dtype=np.int64))
            out[i] = (np.array([n_bins - 1], dtype=np.int32), np.array([total], dtype=np.int64))
        return out


def inflate_support(up: State) -> State:
    """support-inflate: the support row's change (a private mixture's `dH`) masked INFLATE times over."""
    return {**up, "dH": INFLATE * support_change(up, "support-inflate")}


def nonbit_support(up: State) -> State:
    """support-nonbit: the support row's change (a private mixture's `dH`) masked NONBIT times over."""
    return {**up, "dH": NONBIT * support_change(up, "support-nonbit")}


def support_change(up: State, attack: str) -> np.ndarray:
    """The support row's change an attack on it lies in (a private mixture's `dH`)."""
    if "dH" not in up:
        raise ValueError(f"{attack} lies in a private mixture's support row (dH): this upload has none")
    return np.asarray(up["dH"], dtype=float)


NO_ADVERSARIES = Adversaries()
