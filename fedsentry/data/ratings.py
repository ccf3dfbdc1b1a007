"""Ratings files: movielens-small by name, any ratings CSV by its columns, or the built-in synthetic set.

Validated once, here, with one-line errors that name the file, the line and what was expected.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from fedsentry.data.datasets import data_dir
from fedsentry.errors import UsageError
from models.recsys.data import Ratings, from_triples
from models.recsys.synthetic import generate_ratings

DATASETS = ("movielens-small", "synthetic")
MOVIELENS_COLUMNS = ("userId", "movieId", "rating")


def movielens_file(explicit_dir: str | os.PathLike | None = None) -> Path:
    return data_dir(explicit_dir) / "movielens-small" / "ratings.csv"


def movielens_available(explicit_dir: str | os.PathLike | None = None) -> bool:
    return movielens_file(explicit_dir).is_file()


def load_named(name: str, explicit_dir: str | None = None, seed: int = 0, rating_min: float = 0.5,
               rating_max: float = 5.0) -> Ratings:
    """A named data set: movielens-small from the shared data folder, or synthetic (seeded)."""
    if name == "synthetic":
        return generate_ratings(seed=seed, rating_min=rating_min, rating_max=rating_max)
    if name != "movielens-small":
        raise UsageError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)} or give --ratings FILE")
    path = movielens_file(explicit_dir)
    if not path.is_file():
        raise UsageError(f"dataset 'movielens-small' not found at {path} (set --data-dir or FEDSENTRY_DATA_DIR; "
                         "--dataset synthetic needs no files)")
    return load_ratings_csv(path, *MOVIELENS_COLUMNS, rating_min=rating_min, rating_max=rating_max,
                            name="movielens-small")


def load_ratings_csv(path: str | os.PathLike, user_col: str = "userId", item_col: str = "movieId",
                     rating_col: str = "rating", rating_min: float = 0.5, rating_max: float = 5.0,
                     name: str | None = None) -> Ratings:
    """Ratings from a CSV with a header; other columns are ignored. Ids stay as written (numbers when
    every id of the column is a whole number)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"file not found: {path}")
    if not rating_min < rating_max:
        raise UsageError(f"--rating-min {rating_min:g} must be below --rating-max {rating_max:g}")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text CSV file") from None
    except csv.Error as e:
        raise UsageError(f"{path}: malformed CSV ({e})") from None
    if not rows or not any(h.strip() for h in rows[0]):
        raise UsageError(f"{path}: empty file (expected a header with {user_col}, {item_col}, {rating_col})")
    header = [h.strip() for h in rows[0]]
    cols = [_column(header, c, path) for c in (user_col, item_col, rating_col)]
    body = [(n, r) for n, r in enumerate(rows[1:], start=2) if any(x.strip() for x in r)]
    if not body:
        raise UsageError(f"{path}: no ratings after the header")
    users, items, values = [], [], np.empty(len(body))
    width = max(cols) + 1
    for k, (n, r) in enumerate(body):
        if len(r) < width:
            raise UsageError(f"{path}: line {n} has {len(r)} fields, expected at least {width} (header: "
                             f"{', '.join(header)})")
        u, i, v = (r[c].strip() for c in cols)
        if not u or not i:
            raise UsageError(f"{path}: line {n} has an empty {user_col if not u else item_col}")
        try:
            values[k] = float(v)
        except ValueError:
            raise UsageError(f"{path}: line {n}: rating {v!r} is not a number") from None
        if not np.isfinite(values[k]):
            raise UsageError(f"{path}: line {n}: rating {v!r} is not a finite number")
        users.append(u)
        items.append(i)
    lines = np.array([n for n, _ in body])
    try:
        return from_triples(_ids(users), _ids(items), values, rating_min, rating_max, name or path.stem,
                            label="line", numbers=lines)
    except ValueError as e:
        hint = " (set --rating-min/--rating-max if the scale differs)" if "range" in str(e) else ""
        raise UsageError(f"{path}: {e}{hint}") from None


def _column(header: list[str], name: str, path: Path) -> int:
    if name in header:
        return header.index(name)
    lower = [h.lower() for h in header]
    if name.lower() in lower:
        return lower.index(name.lower())
    raise UsageError(f"{path}: no column {name!r} (columns: {', '.join(header)}; choose with "
                     "--user-col/--item-col/--rating-col)")


def _ids(values: list[str]) -> np.ndarray:
    """Whole-number ids as int64, anything else as text."""
    try:
        return np.array([int(v) for v in values], dtype=np.int64)
    except ValueError:
        return np.array(values)

