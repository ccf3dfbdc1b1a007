"""Ratings files: movielens-small by name, any ratings CSV by its columns, or the built-in synthetic sets.

Validated once, here, with one-line errors that name the file, the line and what was expected.
"""

from __future__ import annotations

import csv
import os
from array import array
from pathlib import Path

import numpy as np

from fedsentry.data.datasets import data_dir
from fedsentry.errors import UsageError
from models.recsys.data import Ratings, from_indexed, from_triples, index_id_chunks, index_ids
from models.recsys.synthetic import NETFLIX_SHAPE, generate_longtail, generate_netflix_like, generate_ratings

DATASETS = ("movielens-small", "synthetic", "synthetic-longtail", "netflix-synthetic")
MOVIELENS_COLUMNS = ("userId", "movieId", "rating")


def movielens_file(explicit_dir: str | os.PathLike | None = None) -> Path:
    return data_dir(explicit_dir) / "movielens-small" / "ratings.csv"


def movielens_available(explicit_dir: str | os.PathLike | None = None) -> bool:
    return movielens_file(explicit_dir).is_file()


def load_named(name: str, explicit_dir: str | None = None, seed: int = 0, rating_min: float = 0.5,
               rating_max: float = 5.0, scale: float | None = None) -> Ratings:
    """A named data set: movielens-small from the shared data folder, or synthetic (seeded): `synthetic`
    (600 users, on the given scale), `synthetic-longtail` (6,000 users x 3,000 items, a steep tail of
    items; `models.recsys.synthetic.LONGTAIL`) or `netflix-synthetic` (Netflix-shaped, 1 to 5 stars;
    `scale` takes that share of its 480,189 users and 100,480,507 ratings, all 17,770 items)."""
    if scale is not None and name != "netflix-synthetic":
        raise UsageError("--synthetic-scale applies to --dataset netflix-synthetic only")
    if name == "synthetic":
        return generate_ratings(seed=seed, rating_min=rating_min, rating_max=rating_max)
    if name == "synthetic-longtail":
        return generate_longtail(seed=seed, rating_min=rating_min, rating_max=rating_max)
    if name == "netflix-synthetic":
        users, items, ratings = NETFLIX_SHAPE
        scale = 1.0 if scale is None else scale
        try:
            return generate_netflix_like(round(users * scale), items, round(ratings * scale), seed=seed)
        except ValueError as e:
            raise UsageError(f"--synthetic-scale {scale:g}: {e}") from None
    if name != "movielens-small":
        raise UsageError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)} or give --ratings FILE")
    path = movielens_file(explicit_dir)
    if not path.is_file():
        raise UsageError(f"dataset 'movielens-small' not found at {path} (set --data-dir or FEDSENTRY_DATA_DIR; "
                         "--dataset synthetic needs no files)")
    return load_ratings_csv(path, *MOVIELENS_COLUMNS, rating_min=rating_min, rating_max=rating_max,
                            name="movielens-small")


READERS = ("auto", "arrow", "python")


def load_ratings_csv(path: str | os.PathLike, user_col: str = "userId", item_col: str = "movieId",
                     rating_col: str = "rating", rating_min: float = 0.5, rating_max: float = 5.0,
                     name: str | None = None, reader: str = "auto") -> Ratings:
    """Ratings from a CSV with a header; other columns are ignored. Ids stay as written (numbers when
    every id of the column is a whole number).

    reader: "arrow" parses the three columns with pyarrow (typed, multi-threaded; about 16 bytes a rating
    held, a few tens while loading), "python" line by line with the csv module (no dependency beyond
    numpy: what an edge agent without the server extra uses), "auto" arrow where pyarrow is installed.
    Both give the same Ratings and the same errors: a file arrow cannot take as it is (blank or broken
    lines, ratings that are not finite numbers, rows of other lengths) is checked line by line, which
    names the first bad line, or loaded that way if it is valid after all."""
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r}; choose from {', '.join(READERS)}")
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"file not found: {path}")
    if not rating_min < rating_max:
        raise UsageError(f"--rating-min {rating_min:g} must be below --rating-max {rating_max:g}")
    header = _header(path, user_col, item_col, rating_col)
    cols = [_column(header, c, path) for c in (user_col, item_col, rating_col)]
    name = name or path.stem
    try:
        if reader != "python" and (reader == "arrow" or _have_arrow()):
            found = _read_arrow(path, header, cols, (user_col, item_col), rating_min, rating_max, name)
            if found is not None:
                return found
        return _read_python(path, header, cols, (user_col, item_col), rating_min, rating_max, name)
    except ValueError as e:
        hint = " (set --rating-min/--rating-max if the scale differs)" if "range" in str(e) else ""
        raise UsageError(f"{path}: {e}{hint}") from None


def _have_arrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


def _header(path: Path, user_col: str, item_col: str, rating_col: str) -> list[str]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            first = next(csv.reader(f), [])
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text CSV file") from None
    except csv.Error as e:
        raise UsageError(f"{path}: malformed CSV ({e})") from None
    if not any(h.strip() for h in first):
        raise UsageError(f"{path}: empty file (expected a header with {user_col}, {item_col}, {rating_col})")
    return [h.strip() for h in first]


def _rows(path: Path, header: list[str], cols: list[int], names: tuple[str, str]):
    """(line, user id, item id, rating) of every non-blank line after the header, checked one by one:
    UsageError at the first line that is not valid."""
    width = max(cols) + 1
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = csv.reader(f)
            next(rows, None)
            for n, r in enumerate(rows, start=2):
                if not any(x.strip() for x in r):
                    continue
                if len(r) < width:
                    raise UsageError(f"{path}: line {n} has {len(r)} fields, expected at least {width} (header: "
                                     f"{', '.join(header)})")
                u, i, v = (r[c].strip() for c in cols)
                if not u or not i:
                    raise UsageError(f"{path}: line {n} has an empty {names[0] if not u else names[1]}")
                try:
                    value = float(v)
                except ValueError:
                    raise UsageError(f"{path}: line {n}: rating {v!r} is not a number") from None
                if not np.isfinite(value):
                    raise UsageError(f"{path}: line {n}: rating {v!r} is not a finite number")
                yield n, u, i, value
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text CSV file") from None
    except csv.Error as e:
        raise UsageError(f"{path}: malformed CSV ({e})") from None


def _read_python(path: Path, header: list[str], cols: list[int], names: tuple[str, str], rating_min: float,
                 rating_max: float, name: str) -> Ratings:
    """The csv-module reader: about 200 bytes a rating while loading (the ids are Python strings)."""
    lines, users, items, values = array("q"), [], [], array("d")
    for n, u, i, v in _rows(path, header, cols, names):
        lines.append(n)
        users.append(u)
        items.append(i)
        values.append(v)
    if not values:
        raise UsageError(f"{path}: no ratings after the header")
    return from_triples(_ids(users), _ids(items), np.frombuffer(values, dtype=np.float64), rating_min,
                        rating_max, name, label="line", numbers=np.frombuffer(lines, dtype=np.int64))


class _Lines:
    """Line numbers of the rows arrow read (row r is line r + 2 when no row was dropped), computed only
    for the rows an error names."""

    def __init__(self, kept: np.ndarray | None = None):
        self.kept = kept

    def __getitem__(self, k: int) -> int:
        return int(k if self.kept is None else self.kept[k]) + 2


def _read_arrow(path: Path, header: list[str], cols: list[int], names: tuple[str, str], rating_min: float,
                rating_max: float, name: str) -> Ratings | None:
    """The three columns parsed by pyarrow, ids as int64 where every id is a whole number. None when the
    file needs the line-by-line reader (it holds a line arrow cannot take, or a blank one)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    if len(set(cols)) < 3:
        return None
    fields = [f"f{k}" for k in range(len(header))]
    wanted = [fields[c] for c in cols]

    read_options = pacsv.ReadOptions(skip_rows=1, column_names=fields, block_size=1 << 22)
    parse_options = pacsv.ParseOptions(ignore_empty_lines=False)  # a blank line is a row of nulls

    def convert(id_type):
        return pacsv.ConvertOptions(include_columns=wanted, column_types={wanted[0]: id_type, wanted[1]: id_type,
                                                                          wanted[2]: pa.float64()},
                                    null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=False)

    id_type = pa.int64()
    try:
        found = _stream_whole_numbers(path, read_options, parse_options, convert(id_type), pa, pacsv)
    except pa.ArrowInvalid:  # ids that are not all whole numbers (or a line arrow cannot take)
        found, id_type = None, pa.string()
    if found is not None:
        (user_ids, user), (item_ids, item), values = found
        if not np.isfinite(values).all():
            return None  # nan or inf as written: the line-by-line reader names the line
        return from_indexed(user, item, values, user_ids, item_ids, rating_min, rating_max, name, label="line",
                            numbers=_Lines())
    # text ids, empty fields or blank lines: the whole table, then the checks
    try:
        table = pacsv.read_csv(path, read_options=read_options, parse_options=parse_options,
                               convert_options=convert(id_type))
    except pa.ArrowInvalid:
        if pa.types.is_string(id_type):
            return None
        try:  # ids that are not all whole numbers further down
            table = pacsv.read_csv(path, read_options=read_options, parse_options=parse_options,
                                   convert_options=convert(pa.string()))
        except pa.ArrowInvalid:
            return None
    columns = [table.column(w) for w in wanted]
    del table
    if not len(columns[2]):
        return None
    kept = None
    if any(c.null_count for c in columns) or any(pa.types.is_string(c.type) for c in columns[:2]):
        empty = [_empty(c, pa, pc) for c in columns]
        some, blank = empty[0] | empty[1] | empty[2], empty[0] & empty[1] & empty[2]
        if some.any():
            if (some != blank).any():
                return None  # a line with one or two of the three fields empty: the line-by-line reader names it
            for _ in _rows(path, header, cols, names):  # blank lines, or empty fields beside other columns?
                pass
            kept = np.flatnonzero(~blank)
            if not len(kept):
                return None
            columns = [c.filter(pa.array(~blank)) for c in columns]
        del empty, some, blank
    # one column at a time, each dropped once converted: at most the three parsed columns and one result
    user_ids, user = _index_column(columns.pop(0), pa, pc)
    item_ids, item = _index_column(columns.pop(0), pa, pc)
    values = columns.pop().to_numpy()
    if not np.isfinite(values).all():
        return None  # nan or inf as written: the line-by-line reader names the line
    return from_indexed(user, item, values, user_ids, item_ids, rating_min, rating_max, name, label="line",
                        numbers=_Lines(kept))


def _stream_whole_numbers(path: Path, read_options, parse_options, convert_options, pa, pacsv):
    """Whole-number ids and ratings block by block, each block's ids narrowed to int32 where they fit and
    its arrow buffers dropped at once: about 16 bytes a rating held while reading, 24 at the end. None
    at the first empty field (a blank line, say), for the table reader's checks, and for a file without
    ratings."""
    users, items, values = [], [], []
    with pacsv.open_csv(path, read_options=read_options, parse_options=parse_options,
                        convert_options=convert_options) as reader:
        for batch in reader:
            if any(c.null_count for c in batch.columns):
                return None
            u, i, r = (c.to_numpy() for c in batch.columns)
            users.append(_narrow(u))
            items.append(_narrow(i))
            values.append(r.copy())
            del batch, u, i, r
    if not values:
        return None
    user = _index_chunks(users)
    item = _index_chunks(items)
    return user, item, np.concatenate(values)


def _narrow(ids: np.ndarray) -> np.ndarray:
    """int64 ids as an int32 copy where they fit (a copy either way: the arrow block is let go)."""
    if len(ids) and np.iinfo(np.int32).min <= ids.min() and ids.max() <= np.iinfo(np.int32).max:
        return ids.astype(np.int32)
    return ids.copy()


def _index_chunks(chunks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`index_id_chunks` of int32/int64 blocks, emptying the list as it goes; ids as int64."""
    if len({c.dtype for c in chunks}) > 1:
        chunks[:] = [c.astype(np.int64) for c in chunks]
    ids, index = index_id_chunks(chunks)
    chunks.clear()
    return ids.astype(np.int64), index


def _empty(column, pa, pc) -> np.ndarray:
    """Rows whose field is empty (null for numbers, only spaces for text)."""
    if pa.types.is_string(column.type):
        return pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(column)), 0).to_numpy(zero_copy_only=False)
    return column.is_null().to_numpy(zero_copy_only=False)


def _index_column(column, pa, pc) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ids, each row's position among them) of an id column; text ids become int64 when
    every distinct one is a whole number (as `int` reads it), as the line-by-line reader decides."""
    if not pa.types.is_string(column.type):
        return index_id_chunks([c.to_numpy(zero_copy_only=True) for c in column.chunks if len(c)])
    text = pc.utf8_trim_whitespace(column)
    distinct = pc.unique(text)
    codes = pc.index_in(text, value_set=distinct).to_numpy()
    del text
    words = distinct.to_pylist()
    try:
        ids = np.array([int(w) for w in words], dtype=np.int64)
    except ValueError:
        ids = np.array(words)
    sorted_ids, where = index_ids(ids)  # where: each distinct word's position among the sorted ids
    return sorted_ids, where[codes]


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

