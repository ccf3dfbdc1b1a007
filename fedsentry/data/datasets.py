"""Tabular traffic data: the shared datasets by name, any CSV pair, or one CSV with a label column.

Numeric feature columns are used; an unnamed index column and other non-numeric columns are dropped
with a warning; the label column is never a feature; zero-variance columns are dropped with a warning.
"""

from __future__ import annotations

import csv
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedsentry.errors import UsageError
from models.synthetic import generate_traffic

log = logging.getLogger("fedsentry.data")

NAMED = {"ton-iot": "ton-iot", "nsl-kdd": "nsl-kdd"}
DATASETS = ("synthetic", *NAMED)
LABEL_NAMES = ("label", "outcome", "class", "attack")
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class TrafficData:
    name: str
    feature_names: list[str]
    X_normal: np.ndarray
    X_attack: np.ndarray


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """--data-dir, else $FEDSENTRY_DATA_DIR, else ../shared/data relative to the repository root."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("FEDSENTRY_DATA_DIR")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "data"


def shared_data_available(name: str, explicit: str | None = None) -> bool:
    return (data_dir(explicit) / NAMED.get(name, name) / "normal.csv").is_file()


def load_named(name: str, explicit_dir: str | None = None, seed: int = 0) -> TrafficData:
    if name == "synthetic":
        t = generate_traffic(seed=seed)
        return TrafficData("synthetic", t.feature_names, t.X_normal, t.X_attack)
    if name not in NAMED:
        raise UsageError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)} or give --normal/--abnormal "
                         "or --csv")
    folder = data_dir(explicit_dir) / NAMED[name]
    if not folder.is_dir():
        raise UsageError(f"dataset {name!r} not found under {folder.parent} (set --data-dir or FEDSENTRY_DATA_DIR; "
                         "--dataset synthetic needs no files)")
    return load_pair(folder / "normal.csv", folder / "abnormal.csv", name=name)


def read_csv(
    path: str | os.PathLike, label_column: str | None = None
) -> tuple[list[str], np.ndarray, list[str] | None]:
    """Numeric feature columns of a CSV (names, matrix) and the raw label column if there is one."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"file not found: {path}")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise UsageError(f"{path}: empty file")
    header, body = [h.strip() for h in rows[0]], [r for r in rows[1:] if r]
    if not body:
        raise UsageError(f"{path}: no data rows")
    for n, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise UsageError(f"{path}: line {n} has {len(r)} fields, the header has {len(header)}")
    label_idx = _label_index(header, label_column, path)
    labels = [r[label_idx].strip() for r in body] if label_idx is not None else None
    names, cols, dropped = [], [], []
    for j, h in enumerate(header):
        if j == label_idx:
            continue
        if h == "" or h.lower().startswith("unnamed"):
            dropped.append(f"{h or '(unnamed)'} (index column)")
            continue
        col = _numeric(body, j)
        if col is None:
            dropped.append(f"{h} (not numeric)")
            continue
        bad = np.flatnonzero(~np.isfinite(col))
        if len(bad):
            raise UsageError(f"{path}: column {h!r} has a missing, NaN or infinite value on line {bad[0] + 2}")
        names.append(h)
        cols.append(col)
    if dropped:
        log.warning("%s: dropped columns: %s", path.name, ", ".join(dropped))
    if not names:
        raise UsageError(f"{path}: no numeric feature columns")
    return names, np.column_stack(cols), labels


def _label_index(header: list[str], label_column: str | None, path: Path) -> int | None:
    lower = [h.lower() for h in header]
    if label_column is not None:
        if label_column.lower() not in lower:
            raise UsageError(f"{path}: no label column {label_column!r} (columns: {', '.join(header)})")
        return lower.index(label_column.lower())
    for cand in LABEL_NAMES:
        if cand in lower:
            return lower.index(cand)
    return None


def _numeric(body: list[list[str]], j: int) -> np.ndarray | None:
    try:
        return np.array([float(r[j]) if r[j].strip() != "" else np.nan for r in body])
    except ValueError:
        return None


def load_pair(normal: str | os.PathLike, abnormal: str | os.PathLike, name: str | None = None,
              label_column: str | None = None) -> TrafficData:
    n_names, Xn, _ = read_csv(normal, label_column)
    a_names, Xa, _ = read_csv(abnormal, label_column)
    if n_names != a_names:
        only_n = sorted(set(n_names) - set(a_names))
        only_a = sorted(set(a_names) - set(n_names))
        raise UsageError(f"the two files have different feature columns (only in {Path(normal).name}: "
                         f"{only_n or '-'}; only in {Path(abnormal).name}: {only_a or '-'})")
    return _drop_constant(TrafficData(name or Path(normal).name, n_names, Xn, Xa))


def load_labelled_csv(path: str | os.PathLike, label_column: str | None, normal_value: str) -> TrafficData:
    names, X, labels = read_csv(path, label_column)
    if labels is None:
        raise UsageError(f"{path}: no label column found; name it with --label-column "
                         f"(looked for {', '.join(LABEL_NAMES)})")
    normal = np.array([lab == normal_value for lab in labels])
    if not normal.any():
        raise UsageError(f"{path}: no row has the normal label value {normal_value!r}")
    return _drop_constant(TrafficData(Path(path).name, names, X[normal], X[~normal]))


def _drop_constant(data: TrafficData) -> TrafficData:
    X = np.vstack([data.X_normal, data.X_attack])
    keep = X.max(axis=0) > X.min(axis=0)
    if not keep.all():
        gone = [n for n, k in zip(data.feature_names, keep) if not k]
        log.warning("dropped zero-variance columns (the same value in every row): %s", ", ".join(gone))
    if keep.sum() < 2:
        raise UsageError("fewer than two features vary across the normal records")
    names = [n for n, k in zip(data.feature_names, keep) if k]
    return TrafficData(data.name, names, data.X_normal[:, keep], data.X_attack[:, keep])


@dataclass
class Split:
    X_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def train_test_split(data: TrafficData, seed: int = 0, train_share: float = 0.7, contamination: float = 0.0) -> Split:
    """70 % of the normal rows train (seeded); the rest and every attack row test.

    contamination > 0 mixes that share of attack rows into the training records (taken out of the test
    set), to measure training on traffic that is not clean."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(data.X_normal))
    n_train = int(round(train_share * len(perm)))
    X_train, X_test_n = data.X_normal[perm[:n_train]], data.X_normal[perm[n_train:]]
    X_att = data.X_attack[rng.permutation(len(data.X_attack))]
    if contamination > 0:
        n_mix = int(round(contamination * n_train / (1 - contamination)))
        if n_mix > len(X_att):
            raise UsageError(f"contamination {contamination} needs {n_mix} attack rows, only {len(X_att)} exist")
        X_train = np.vstack([X_train, X_att[:n_mix]])[rng.permutation(n_train + n_mix)]
        X_att = X_att[n_mix:]
    X_test = np.vstack([X_test_n, X_att])
    y = np.r_[np.zeros(len(X_test_n), int), np.ones(len(X_att), int)]
    return Split(X_train, X_test, y)
