"""Devices that tell no lie: they train on traffic that includes an attacker's and upload true statistics (a
compromised camera, a device the attacker owns). What the support rule (models.mixture.fedem) stands against;
`fedsentry simulate pca --adversaries K --attack compliant` (and inflate, models.detection.attacks) and the tests
measure it."""

from __future__ import annotations

import numpy as np

from models.mixture.gmm import kmeans


def compliant_rogues(parts: list[np.ndarray], attacks: np.ndarray, rogues: int, rows: int = 300,
                     kinds: int = 3, seed: int = 0, held: np.ndarray | None = None) -> list[np.ndarray]:
    """The devices' training records with the first `rogues` devices also holding `rows` attack records each of
    the `kinds` commonest kinds (`attack_kinds`), or of the kinds `held` names: a compromised device, or one the
    attacker owns, that trains honestly on that traffic and uploads its true statistics."""
    kind = attack_kinds(attacks, seed)
    chosen = commonest(kind, kinds) if held is None else np.asarray(held)
    common = attacks[np.isin(kind, chosen)]
    out = list(parts)
    for r in range(min(rogues, len(parts))):
        out[r] = np.vstack([parts[r], common[np.random.default_rng(seed + 10 + r).choice(len(common), rows)]])
    return out


def attack_kinds(attacks: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each attack record's kind: its cluster of 8 (k-means in standardised signed-log1p units)."""
    T = np.sign(attacks) * np.log1p(np.abs(attacks))
    T = (T - T.mean(axis=0)) / (T.std(axis=0) + 1e-9)
    _, kind = kmeans(T, 8, np.random.default_rng(seed + 1))
    return np.asarray(kind)


def commonest(kind: np.ndarray, kinds: int = 3) -> np.ndarray:
    """The `kinds` commonest kinds, commonest first."""
    return np.argsort(-np.bincount(kind))[:kinds]
