"""Records with missing numbers, categories and flag strings, encoded as one numeric vector each.

A record has numeric fields (NaN when missing: Zeek's unset ``-``), categorical fields (strings such as
Zeek's ``proto``, ``service``, ``conn_state``) and flag strings (Zeek's ``history``: each letter a flag,
case-sensitive). The categories must be encoded the same way on every device, so the vocabulary is agreed
once, from counts, in the statistics phase:

- on each device, :func:`local_counts` counts the values of every categorical field, the letters of every
  flag field and the present and missing values of every numeric field (bounded, validated);
- the coordinator checks each device's counts (:func:`check_counts`) and :func:`agree_vocabulary` keeps the
  values that at least ``min_devices`` devices saw, often enough, so that no single device can add a value
  or grow the model; it returns the :class:`FeatureEncoder` every device then uses;
- the mean and scale of the encoder's 0/1 columns (missing indicators, one-hot, flags) follow from the same
  counts (:func:`binary_moments`, :func:`binary_standardisation`): no second round.

Encoded, a missing number stays NaN in its column (the model's preprocessing imputes it at the global mean,
0 after standardisation) and its ``<field>_missing`` indicator is 1. A category outside the vocabulary
falls into ``<field>=other``; a missing or empty category is the value ``(unset)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ENCODING_VERSION = 1
OTHER = "other"  # the one-hot column of values outside the vocabulary: never a vocabulary value itself
MISSING = "(unset)"  # the value of a missing or empty category
MAX_VALUE_CHARS = 64
MAX_REPORTED = 64  # values per field a device reports (its most frequent); agree_vocabulary refuses more

Text = Mapping[str, "Sequence[str | None] | np.ndarray"]


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name or not name.isprintable() or len(name) > MAX_VALUE_CHARS:
        raise ValueError(f"{what} {name!r} is not a name (1 to {MAX_VALUE_CHARS} printable characters)")
    if any(c in name for c in "=: "):
        raise ValueError(f"{what} {name!r} contains '=', ':' or a space (they separate the feature names)")
    return name


def valid_value(v: object) -> bool:
    """A category a device may report: a printable string of 1 to MAX_VALUE_CHARS characters."""
    return isinstance(v, str) and 0 < len(v) <= MAX_VALUE_CHARS and v.isprintable()


def valid_flag(v: object) -> bool:
    """A flag: one printable, non-space character (case matters: Zeek's S and s are different flags)."""
    return isinstance(v, str) and len(v) == 1 and v.isprintable() and not v.isspace()


def category(v: object) -> str:
    """A categorical value as encoded: missing (None, NaN) and empty values are MISSING."""
    if v is None or v == "" or (isinstance(v, float) and v != v):
        return MISSING
    return str(v)


@dataclass(frozen=True)
class RecordSchema:
    """Which fields of a record are numeric, categorical and flag strings."""

    numeric: list[str]
    categorical: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        names = [*self.numeric, *self.categorical, *self.flags]
        for n in names:
            _check_name(n, "field")
        dup = sorted(n for n, c in Counter(names).items() if c > 1)
        if dup:
            raise ValueError(f"fields named more than once in the schema: {', '.join(dup)}")

    def to_dict(self) -> dict[str, Any]:
        return {"numeric": list(self.numeric), "categorical": list(self.categorical), "flags": list(self.flags)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RecordSchema:
        return cls(list(d["numeric"]), list(d.get("categorical", [])), list(d.get("flags", [])))


# Zeek's conn.log as the agent reads it (edge_agent.sources): the numeric fields under TON-IoT's names.
ZEEK_CONN = RecordSchema(
    numeric=["duration", "src_bytes", "dst_bytes", "missed_bytes", "src_pkts", "src_ip_bytes", "dst_pkts",
             "dst_ip_bytes"],
    categorical=["proto", "service", "conn_state"],
    flags=["history"],
)


def _check_columns(numeric: np.ndarray, text: Text, numeric_names: Sequence[str],
                   text_names: Sequence[str]) -> tuple[np.ndarray, int]:
    X = np.asarray(numeric, dtype=float)
    if X.ndim != 2 or X.shape[1] != len(numeric_names):
        raise ValueError(f"numeric columns: expected shape (n, {len(numeric_names)}) for "
                         f"{', '.join(numeric_names) or 'no fields'}, got {X.shape}")
    n = X.shape[0]
    absent = [f for f in text_names if f not in text]
    if absent:
        raise ValueError(f"records lack the text fields: {', '.join(absent)}")
    for f in text_names:
        if len(text[f]) != n:
            raise ValueError(f"text field {f!r} has {len(text[f])} values for {n} records")
    return X, n


def _top(counter: Counter[str], limit: int) -> dict[str, int]:
    """The `limit` most frequent values, most frequent first (ties by value: deterministic)."""
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:limit])


def local_counts(schema: RecordSchema, numeric: np.ndarray, text: Text,
                 max_values: int = MAX_REPORTED) -> dict[str, Any]:
    """What one device reports for the vocabulary (JSON): its record count; per numeric field the present
    and missing (NaN) values; per categorical field the count of each value; per flag field the number of
    records holding each letter. At most `max_values` values per field, the most frequent; invalid values
    (not printable, longer than MAX_VALUE_CHARS) are left out.

    `numeric` is (n, len(schema.numeric)) in the schema's order; `text` maps each categorical and flag
    field to its n values (None when missing)."""
    X, n = _check_columns(numeric, text, schema.numeric, [*schema.categorical, *schema.flags])
    missing = np.isnan(X).sum(axis=0)
    out: dict[str, Any] = {
        "n": n,
        "numeric": {f: {"present": int(n - m), "missing": int(m)} for f, m in zip(schema.numeric, missing)},
        "categorical": {},
        "flags": {},
    }
    for f in schema.categorical:
        c = Counter(v for v in map(category, text[f]) if valid_value(v))
        out["categorical"][f] = _top(c, max_values)
    for f in schema.flags:
        c = Counter()
        for s, k in Counter(_flag_string(v) for v in text[f]).items():  # each record counts once per letter
            for letter in set(s):
                if valid_flag(letter):
                    c[letter] += k
        out["flags"][f] = _top(c, max_values)
    return out


def _count(v: object, n: int, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > n:
        raise ValueError(f"{where}: {v!r} is not a count between 0 and the device's {n} records")
    return v


def check_counts(counts: object, schema: RecordSchema | None = None,
                 max_values: int = MAX_REPORTED) -> dict[str, Any]:
    """One device's counts, checked (what ``local_counts`` makes); ValueError saying what is wrong.

    With a schema, the fields must be exactly the schema's. The coordinator can call this as each device's
    counts arrive and leave out a device that sent garbage, as it does with any bad upload."""
    if not isinstance(counts, Mapping):
        raise ValueError(f"counts must be an object, got {type(counts).__name__}")
    extra = sorted(set(counts) - {"n", "numeric", "categorical", "flags"})
    if extra:
        raise ValueError(f"counts have unknown keys: {', '.join(map(str, extra))}")
    n = counts.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"counts: 'n' must be the device's record count (an integer >= 0), got {n!r}")
    parts = {}
    for part in ("numeric", "categorical", "flags"):
        p = counts.get(part, {})
        if not isinstance(p, Mapping):
            raise ValueError(f"counts: {part!r} must be an object of fields, got {type(p).__name__}")
        for f in p:
            _check_name(f, f"counts: {part} field")
        if schema is not None:
            want = getattr(schema, part)
            if set(p) != set(want):
                raise ValueError(f"counts: {part} fields {sorted(p)} are not the schema's {sorted(want)}")
        parts[part] = p
    out: dict[str, Any] = {"n": n, "numeric": {}, "categorical": {}, "flags": {}}
    for f, v in parts["numeric"].items():
        if not isinstance(v, Mapping) or set(v) != {"present", "missing"}:
            raise ValueError(f"counts: numeric field {f!r} must be {{'present': int, 'missing': int}}, got {v!r}")
        present = _count(v["present"], n, f"counts: numeric field {f!r} present")
        miss = _count(v["missing"], n, f"counts: numeric field {f!r} missing")
        if present + miss != n:
            raise ValueError(f"counts: numeric field {f!r}: present {present} + missing {miss} != n {n}")
        out["numeric"][f] = {"present": present, "missing": miss}
    for part, valid, what in (("categorical", valid_value, "value"), ("flags", valid_flag, "flag")):
        for f, values in parts[part].items():
            if not isinstance(values, Mapping):
                raise ValueError(f"counts: {part} field {f!r} must be an object of {what} counts")
            if len(values) > max_values:
                raise ValueError(f"counts: {part} field {f!r} reports {len(values)} {what}s, at most "
                                 f"{max_values} allowed")
            for v in values:
                if not valid(v):
                    raise ValueError(f"counts: {part} field {f!r}: {v!r} is not a valid {what}")
            checked = {v: _count(c, n, f"counts: {part} field {f!r} {what} {v!r}") for v, c in values.items()}
            if part == "categorical" and sum(checked.values()) > n:
                raise ValueError(f"counts: categorical field {f!r}: the values count {sum(checked.values())} "
                                 f"records, more than the device's {n}")
            out[part][f] = checked
    return out


def _agree(per_device: list[Mapping[str, int]], min_devices: int, min_count: int, max_values: int,
           exclude: tuple[str, ...] = ()) -> list[str]:
    """Values seen on >= min_devices devices whose count, without the largest single device's share when
    min_devices >= 2, reaches min_count; the max_values largest by that count."""
    seen: dict[str, list[int]] = {}
    for counts in per_device:
        for v, c in counts.items():
            if c > 0 and v not in exclude:
                seen.setdefault(v, []).append(c)
    keep = []
    for v, cs in seen.items():
        if len(cs) < min_devices:
            continue
        vouched = sum(cs) - (max(cs) if min_devices >= 2 else 0)  # no single device decides alone
        if vouched >= min_count:
            keep.append((-vouched, -len(cs), v))
    return [v for _, _, v in sorted(keep)[:max_values]]


def agree_vocabulary(device_counts: Sequence[object], *, min_devices: int | None = None, min_count: int = 10,
                     max_values: int = 32, schema: RecordSchema | None = None,
                     max_reported: int = MAX_REPORTED) -> FeatureEncoder:
    """The encoder every device uses, from the devices' ``local_counts``.

    A category (or flag letter) enters the vocabulary when at least `min_devices` devices saw it (default
    2, 1 when there is only one device) and its total count without the largest device's share reaches
    `min_count`: one device cannot add a value alone nor push one in by inflating its count. At most
    `max_values` values per field (the most frequent); every other value encodes as ``<field>=other``.
    A numeric field gets a missing indicator under the same rule applied to its missing counts.
    ValueError (naming the device's position in the list) on malformed counts; without a schema, all
    devices must report the same fields."""
    if not device_counts:
        raise ValueError("no device counts: cannot agree on a vocabulary")
    if min_devices is None:
        min_devices = min(2, len(device_counts))
    for name, v in (("min_devices", min_devices), ("min_count", min_count), ("max_values", max_values)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "min_count" else 1):
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    checked = []
    for i, c in enumerate(device_counts):
        try:
            checked.append(check_counts(c, schema, max_reported))
        except ValueError as e:
            raise ValueError(f"device {i}: {e}") from None
    if schema is None:
        first = checked[0]
        schema = RecordSchema(list(first["numeric"]), list(first["categorical"]), list(first["flags"]))
        for i, c in enumerate(checked[1:], start=1):
            try:
                check_counts(c, schema, max_reported)
            except ValueError as e:
                raise ValueError(f"device {i} disagrees with device 0: {e}") from None
    args = (min_devices, min_count, max_values)
    indicators = set(_agree([{f: c["numeric"][f]["missing"] for f in schema.numeric} for c in checked],
                            min_devices, min_count, len(schema.numeric)))
    return FeatureEncoder(
        numeric=list(schema.numeric),
        categorical={f: _agree([c["categorical"][f] for c in checked], *args, exclude=(OTHER,))
                     for f in schema.categorical},
        flags={f: sorted(_agree([c["flags"][f] for c in checked], *args)) for f in schema.flags},
        missing_indicators=[f for f in schema.numeric if f in indicators],
    )


class FeatureEncoder:
    """Maps records onto the model's columns: numeric fields (NaN when missing), their ``<f>_missing``
    indicators, one-hot ``field=value`` columns (with ``field=other``), ``field:<letter>`` flag columns."""

    def __init__(self, numeric: list[str], categorical: dict[str, list[str]], flags: dict[str, list[str]],
                 missing_indicators: list[str]):
        RecordSchema(list(numeric), list(categorical), list(flags))  # names valid and distinct
        unknown = [f for f in missing_indicators if f not in numeric]
        if unknown:
            raise ValueError(f"missing indicators for fields that are not numeric: {', '.join(unknown)}")
        for f, values in categorical.items():
            bad = [v for v in values if not valid_value(v) or v == OTHER]
            if bad:
                raise ValueError(f"categorical field {f!r}: invalid values {bad!r} ({OTHER!r} is reserved)")
            if len(set(values)) != len(values):
                raise ValueError(f"categorical field {f!r}: a value is listed twice")
        for f, letters in flags.items():
            bad = [v for v in letters if not valid_flag(v)]
            if bad or len(set(letters)) != len(letters):
                raise ValueError(f"flag field {f!r}: flags must be distinct single characters, got {letters!r}")
        self.numeric = list(numeric)
        self.categorical = {f: list(v) for f, v in categorical.items()}
        self.flags = {f: list(v) for f, v in flags.items()}
        self.missing_indicators = [f for f in numeric if f in set(missing_indicators)]
        self._indicator_index = [self.numeric.index(f) for f in self.missing_indicators]
        self._lookup = {f: {v: j for j, v in enumerate(values)} for f, values in self.categorical.items()}

    @property
    def feature_names(self) -> list[str]:
        names = [*self.numeric, *(f"{f}_missing" for f in self.missing_indicators)]
        for f, values in self.categorical.items():
            names += [f"{f}={v}" for v in values] + [f"{f}={OTHER}"]
        for f, letters in self.flags.items():
            names += [f"{f}:{c}" for c in letters]
        return names

    @property
    def n_features(self) -> int:
        return (len(self.numeric) + len(self.missing_indicators) + sum(len(v) + 1 for v in self.categorical.values())
                + sum(len(v) for v in self.flags.values()))

    @property
    def binary(self) -> np.ndarray:
        """Bool mask of the 0/1 columns (indicators, one-hot, flags): no log1p for them, and their moments
        come from counts."""
        mask = np.ones(self.n_features, dtype=bool)
        mask[: len(self.numeric)] = False
        return mask

    def encode(self, numeric: np.ndarray, text: Text) -> np.ndarray:
        """(n, n_features) float array; `numeric` is (n, len(self.numeric)) with NaN for missing values,
        `text` maps each categorical and flag field to its n values (None when missing)."""
        X, n = _check_columns(numeric, text, self.numeric, [*self.categorical, *self.flags])
        out = np.zeros((n, self.n_features))
        p = len(self.numeric)
        out[:, :p] = X
        j = p
        for i in self._indicator_index:
            out[:, j] = np.isnan(X[:, i])
            j += 1
        rows = np.arange(n)
        for f, lookup in self._lookup.items():
            idx, distinct = _factorize(category(v) for v in text[f])  # distinct values are few: look up once
            other = len(lookup)
            codes = np.array([lookup.get(v, other) for v in distinct], dtype=np.intp)
            out[rows, j + codes[idx]] = 1.0
            j += other + 1
        for f, letters in self.flags.items():
            idx, distinct = _factorize(_flag_string(v) for v in text[f])
            table = np.array([[c in s for c in letters] for s in distinct], dtype=float)
            out[:, j: j + len(letters)] = table.reshape(len(distinct), len(letters))[idx]
            j += len(letters)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"version": ENCODING_VERSION, "numeric": list(self.numeric),
                "categorical": {f: list(v) for f, v in self.categorical.items()},
                "flags": {f: list(v) for f, v in self.flags.items()},
                "missing_indicators": list(self.missing_indicators), "feature_names": self.feature_names}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FeatureEncoder:
        if not isinstance(d, Mapping) or d.get("version") != ENCODING_VERSION:
            got = d.get("version") if isinstance(d, Mapping) else type(d).__name__
            raise ValueError(f"unsupported feature encoding version {got!r} (expected {ENCODING_VERSION})")
        try:
            enc = cls(list(d["numeric"]), dict(d["categorical"]), dict(d["flags"]), list(d["missing_indicators"]))
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed feature encoding: {e}") from None
        if "feature_names" in d and list(d["feature_names"]) != enc.feature_names:
            raise ValueError("feature encoding: its feature_names do not match its fields (columns reordered?)")
        return enc

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureEncoder) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FeatureEncoder({self.n_features} features: {', '.join(self.feature_names[:6])}, ...)"


def _flag_string(v: object) -> str:
    """A flag field's letters: a missing (None) or non-text value holds none."""
    return v if isinstance(v, str) else ""


def _factorize(values: Iterable[str]) -> tuple[np.ndarray, list[str]]:
    """(index of each value in the distinct values, the distinct values in order of first appearance)."""
    seen: dict[str, int] = {}
    idx = np.fromiter((seen.setdefault(v, len(seen)) for v in values), dtype=np.intp)
    return idx, list(seen)


def binary_moments(encoder: FeatureEncoder, counts: Mapping[str, Any]) -> tuple[int, np.ndarray, np.ndarray]:
    """One device's (count, sum, sum of squares) of the encoder's 0/1 columns, from its counts alone:
    a 0/1 column's sum and sum of squares are both the number of records where it is 1.

    ``<field>=other`` is what the device's reported values leave over; a value in the vocabulary that the
    device did not report (beyond its MAX_REPORTED most frequent) is counted as other: exact whenever a
    device has at most MAX_REPORTED distinct values in a field."""
    c = check_counts(counts, RecordSchema(encoder.numeric, list(encoder.categorical), list(encoder.flags)))
    n = c["n"]
    ones: list[float] = [c["numeric"][f]["missing"] for f in encoder.missing_indicators]
    for f, values in encoder.categorical.items():
        got = [c["categorical"][f].get(v, 0) for v in values]
        ones += [*got, max(n - sum(got), 0)]
    for f, letters in encoder.flags.items():
        ones += [c["flags"][f].get(x, 0) for x in letters]
    total = np.asarray(ones, dtype=float)
    return n, total, total.copy()


def binary_standardisation(encoder: FeatureEncoder, device_counts: Sequence[Mapping[str, Any]],
                           min_scale: float = 1e-12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled mean and scale of the 0/1 columns (in ``encoder.binary`` order): mean p = ones / n, scale
    sqrt(p (1 - p)); returns (mean, scale, zero_variance_mask), zero-variance columns with scale 1."""
    moments = [binary_moments(encoder, c) for c in device_counts]
    n = sum(m[0] for m in moments)
    if n == 0:
        raise ValueError("no records in the device counts: cannot compute the columns' statistics")
    mean = np.sum([m[1] for m in moments], axis=0) / n
    scale = np.sqrt(np.maximum(np.sum([m[2] for m in moments], axis=0) / n - mean**2, 0.0))
    zero = scale <= min_scale
    return mean, np.where(zero, 1.0, scale), zero


@dataclass
class EncodedStatistics:
    """Each device's (count, sum, sum of squares) of every encoded column, and the encoder: what the
    standardisation (models.detection.screening.federation_statistics) takes."""

    encoder: FeatureEncoder
    count: np.ndarray  # (devices,)
    total: np.ndarray  # (devices, encoder.n_features)
    sumsq: np.ndarray


def encoded_statistics(schema: RecordSchema, device_counts: Sequence[Mapping[str, Any]], total: np.ndarray,
                       sumsq: np.ndarray, present: np.ndarray) -> EncodedStatistics:
    """From the statistics phase alone: the agreed encoder, and each device's moments of every encoded column.

    Numeric features: devices send the sum and sum of squares of their set values (transformed) and how many
    are set; an unset value is taken at the pooled mean of the set ones, mu, so a device's column sums gain
    (n - present) mu and (n - present) mu^2. The 0/1 columns' moments are counts (`binary_moments`)."""
    encoder = agree_vocabulary(device_counts, schema=schema)
    count = np.array([float(c["n"]) for c in device_counts])
    mu = total.sum(axis=0) / np.maximum(present.sum(axis=0), 1.0)
    unset = count[:, None] - present
    binary = [binary_moments(encoder, c) for c in device_counts]
    ones = np.stack([b[1] for b in binary]) if binary else np.zeros((0, 0))
    return EncodedStatistics(encoder, count, np.hstack([total + unset * mu, ones]),
                             np.hstack([sumsq + unset * mu**2, ones]))

