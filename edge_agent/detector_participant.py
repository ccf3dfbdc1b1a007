"""An agent's part in an anomaly-detection job, whatever its model family (the round loop itself is
`edge_agent.participant`):

- ``stats``: send count, sum and sum of squares of the transformed training records;
- ``threshold``: send a histogram of the errors of the records the family takes its threshold from.

`edge_agent.pca_participant` and `edge_agent.mixture_participant` add the client data of their algorithm.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from edge_agent.memory import buffer_capacity, import_numpy_random
from edge_agent.participant import Participant, Request, require_private
from edge_agent.sources import FLOW_FIELDS, Batch, SchemaError, batch_counts, encode_batch, select, take_rows
from edge_agent.store import AgentStore
from models.core.messages import RoundMessage
from models.core.pipeline import cap_weights
from models.detection.encoding import FeatureEncoder, RecordSchema
from models.detection.messages import Counted, DetectorRound, Histogram, Statistics
from models.detection.preprocessing import RECORD_DTYPE, Moments, Preprocessor, signed_log1p
from models.detection.threshold import sparse_histogram
from wire.protocol import Envelope

log = logging.getLogger("fedsentry.agent")
#: the round message of the detector family (DetectorRound or a family's subclass)
R = TypeVar("R", bound=DetectorRound)
#: records a training buffer holds unless a memory budget says fewer (edge_agent.memory)
DEFAULT_CAPACITY = 50_000
STATS_CHUNK = 4096
#: records per block of a pass over the training buffer read from disk (`TrainingBuffer.blocks`): 132 KiB at 33
#: columns, and the float64 working copies of a block stay near 270 KiB
BLOCK = 1024


class TrainingBuffer:
    """The records an agent learns normal traffic from (a bounded reservoir sample), kept on disk: their
    numeric columns (NaN where unset) as float32, 4 bytes a value (a byte counter keeps 7 significant digits,
    far finer than the signed log1p the model sees), and their text fields (not the flow identifiers). Its
    array grows by doubling up to `capacity`, so a buffer that is not full holds no room it does not use.

    The records are read from disk when first needed; `park` lets go of them (an agent that does not learn
    from its traffic needs them only during a job's rounds, and scores in less memory between jobs)."""

    def __init__(self, store: AgentStore, capacity: int = DEFAULT_CAPACITY, seed: int = 0,
                 budget_mib: float | None = None):
        self.store, self.most, self.seed, self.budget_mib = store, int(capacity), seed, budget_mib
        meta = store.load_json("training", {"columns": [], "seen": 0})
        self.columns: list[str] = meta["columns"]
        self.seen: int = meta["seen"]
        self._X: np.ndarray | None = None
        self._text: dict[str, list[str | None]] | None = None
        self.capacity = self._capacity()
        self.size = 0
        self.dirty = False  # records added since the last save
        self._rng_seed = seed + self.seen
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        """The reservoir's generator, made when the reservoir is first full (numpy.random costs an agent that
        never needs it about 3 MiB resident)."""
        if self._rng is None:
            import_numpy_random()
            self._rng = np.random.default_rng(self._rng_seed)
        return self._rng

    def _capacity(self) -> int:
        """At most `capacity` records, fewer where a memory budget says so (edge_agent.memory)."""
        if self.budget_mib is None or not self.columns:
            return self.most
        n = buffer_capacity(self.budget_mib, len(self.columns) + len(self._text or {}), self.most)
        if n < self.most:
            log.info("training buffer: %d records of %d columns fit a memory budget of %g MiB", n,
                     len(self.columns), self.budget_mib)
        return n

    def _load(self) -> None:
        if self._X is not None:
            return
        saved = self.store.load_arrays("training")
        X = saved["X"] if saved else np.zeros((0, len(self.columns)), dtype=RECORD_DTYPE)
        text: dict[str, list[str | None]] = self.store.load_json("training-text", {})
        if len(X) > self.capacity:  # a smaller capacity than the saved buffer's (a lower memory budget)
            import_numpy_random()
            keep = np.sort(np.random.default_rng(self.seed).choice(len(X), self.capacity, replace=False))
            X = X[keep]
            text = {f: [v[i] for i in keep] for f, v in text.items()}
        self._X, self._text = np.asarray(X, dtype=RECORD_DTYPE), text
        self.size = len(X)

    def park(self) -> None:
        """Let go of the records (saved first): they are read again from disk when next needed."""
        if self._X is not None:
            if self.dirty:
                self.save()
            self._X = self._text = None

    @property
    def X(self) -> np.ndarray:  # noqa: N802 (the records, as everywhere in models/)
        """The records held (a view)."""
        self._load()
        assert self._X is not None
        return self._X[: self.size]

    @property
    def text(self) -> dict[str, list[str | None]]:
        self._load()
        assert self._text is not None
        return self._text

    def _reserve(self, n: int) -> None:
        assert self._X is not None
        if n > len(self._X):
            grown = np.empty((min(max(n, 2 * len(self._X), 1024), self.capacity), len(self.columns)), RECORD_DTYPE)
            grown[: self.size] = self._X[: self.size]
            self._X = grown

    def add(self, batch: Batch) -> None:
        if not self.columns:
            self.columns = list(batch.columns)
            self._X = np.zeros((0, len(self.columns)), dtype=RECORD_DTYPE)
            self._text = {f: [] for f in (batch.text or {}) if f not in FLOW_FIELDS}
            self.capacity = self._capacity()
        self._load()
        assert self._X is not None
        X = select(batch, self.columns)
        text = {f: list((batch.text or {}).get(f, [None] * len(X))) for f in self.text}
        room = min(max(self.capacity - self.size, 0), len(X))
        if room > 0:
            self._reserve(self.size + room)
            self._X[self.size: self.size + room] = X[:room]
            self.size += room
            for f in self.text:
                self.text[f] += text[f][:room]
        for i in range(room, len(X)):
            j = self.rng.integers(0, self.seen + i + 1)  # reservoir sampling: a uniform sample of all records
            if j < self.capacity:
                self._X[j] = X[i]
                for f in self.text:
                    self.text[f][j] = text[f][i]
        self.seen += len(X)
        self.dirty = True

    def save(self) -> None:
        self.store.save_arrays("training", {"X": self.X})
        self.store.save_json("training-text", self.text)
        self.store.save_json("training", {"columns": self.columns, "seen": self.seen})
        self.dirty = False

    def batch(self) -> Batch:
        return Batch(self.columns, self.X, text={f: np.array(v, dtype=object) for f, v in self.text.items()})

    def _on_disk(self) -> int | None:
        """How many records a pass may read from disk a block at a time: the saved buffer's, when it is parked
        and no lower capacity makes loading it draw a sample (None: the records held, or that sample)."""
        if self._X is not None:
            return None
        n = self.store.array_rows("training", "X")
        return n if n is not None and n <= self.capacity else None

    def count(self) -> int:
        """How many records the buffer holds, without reading them (a parked buffer's from its file's header)."""
        n = self._on_disk()
        return len(self.X) if n is None else n

    def blocks(self, size: int = BLOCK) -> Iterator[Batch]:
        """The records in order, `size` at a time, with their text fields. A parked buffer is read from disk a
        block at a time, so a pass over every record (fitting a promoted model to the device) holds one block,
        not a copy of them all (6.6 MiB at 50,000 records of 33 columns); a loaded buffer gives views. Read-only."""
        if self._on_disk() is None:
            batch = self.batch()
            for i in range(0, len(batch.X), size):
                yield take_rows(batch, slice(i, i + size))
            return
        text: dict[str, list[str | None]] = self.store.load_json("training-text", {})
        start = 0
        for X in self.store.read_rows("training", "X", size):
            yield Batch(self.columns, X, text={f: np.array(v[start: start + len(X)], dtype=object)
                                               for f, v in text.items()})
            start += len(X)

    def matrix(self, features: list[str]) -> np.ndarray:
        return select(Batch(self.columns, self.X), features)


class DetectorParticipant(Participant, Generic[R]):
    round_message: ClassVar[type[RoundMessage]] = DetectorRound
    #: the family's replies to the statistics and threshold phases (models.detection.messages)
    statistics: ClassVar[type[Statistics]] = Statistics
    histogram: ClassVar[type[Histogram]] = Histogram

    def __init__(self, agent_id: str, store: AgentStore, buffer: TrainingBuffer):
        super().__init__(agent_id, store)
        self.buffer = buffer

    def phases(self) -> dict[str, Callable[[Request], Envelope | None]]:
        return {"stats": self._stats, "threshold": self._threshold}

    # -- what a family decides ----------------------------------------------------------------------------
    def require_records(self) -> None:
        if not self.buffer.seen:
            raise SchemaError("no training records yet: give --train FILE (CSV or Zeek log), or let the agent "
                              "learn from the traffic it reads (--learn; on by default with --zeek)")

    def training(self, msg: R) -> Batch:
        """The records the model is fitted on (a family may hold some out: `training_rows`)."""
        self.require_records()
        rows = self.training_rows(msg)
        return self.buffer.batch() if rows is None else take_rows(self.buffer.batch(), rows)

    def training_rows(self, msg: R) -> np.ndarray | None:
        """Which of the buffer's records the model is fitted on (None: all of them)."""
        return None

    @staticmethod
    def columns(batch: Batch, msg: R) -> np.ndarray:
        """A batch in the model's columns: after the statistics phase, encoded as the job agreed
        (models.detection.encoding;
        NaN where a number is unset), before it, the job's numeric features."""
        if msg.encoding:
            return encode_batch(batch, FeatureEncoder.from_dict(msg.encoding))
        return select(batch, msg.features)

    def records(self, msg: R) -> np.ndarray:
        """The training records in the model's columns, as float64."""
        return np.asarray(self.columns(self.training(msg), msg), dtype=float)

    def standardised(self, msg: R) -> np.ndarray:
        """The training records in the model's columns, standardised, as RECORD_DTYPE: built a chunk of the
        buffer at a time, so the only copy of the training records is the result (4 bytes a value)."""
        self.require_records()
        pre = self.preprocessor(msg)
        batch = self.buffer.batch()
        rows = self.training_rows(msg)
        rows = np.arange(len(batch.X)) if rows is None else np.flatnonzero(rows) if rows.dtype == bool else rows
        out = np.empty((len(rows), pre.n_features), dtype=RECORD_DTYPE)
        for i in range(0, len(rows), STATS_CHUNK):
            out[i: i + STATS_CHUNK] = pre.transform(self.columns(take_rows(batch, rows[i: i + STATS_CHUNK]), msg))
        return out

    def threshold_errors(self, msg: R, pre: Preprocessor) -> np.ndarray:
        """The errors whose histogram sets the threshold, under the final model."""
        raise NotImplementedError

    def stats_extra(self, msg: R) -> dict[str, np.ndarray]:
        """The fields a family's statistics message adds (`statistics`)."""
        return {}

    # -- shared ---------------------------------------------------------------------------------------------
    def weight(self, req: Request) -> float:
        """The weight the coordinator gives this device (its record count, capped: models.detection.screening): as
        the round lists it, or the job's caps applied to the count this device sent in the statistics phase."""
        msg: R = req.msg
        if msg.weights is not None:
            return float(msg.weights[msg.sampled.index(self.id)])
        if msg.cap_level is None or msg.cap_scale is None:
            raise ValueError("a training round carries the sampled devices' weights or the job's weight caps")
        stats = self.answered(req.job, "stats", 0)
        if stats is None:
            raise ValueError(f"this device did not answer the statistics phase of job {req.job}: it is not one of "
                             "its participants")
        return float(cap_weights(stats.arrays["count"][:1].astype(float), msg.cap_level, msg.cap_scale)[0])

    @staticmethod
    def log_mask(msg: R, d: int) -> np.ndarray:
        """Which columns get signed log1p: the job's (after the statistics phase), else every numeric one."""
        if msg.log_mask is not None:
            return np.asarray(msg.log_mask, dtype=bool)
        return np.full(d, msg.log_transform)

    def transformed(self, X: np.ndarray, msg: R) -> np.ndarray:
        return signed_log1p(X, self.log_mask(msg, X.shape[1]))

    @staticmethod
    def standardisation(msg: R) -> tuple[np.ndarray, np.ndarray]:
        """The fleet's mean and scale (every round after the statistics phase carries them)."""
        if msg.mean is None or msg.scale is None:
            raise ValueError(f"a {msg.phase} round carries the fleet's standardisation (mean and scale)")
        return msg.mean, msg.scale

    def preprocessor(self, msg: R) -> Preprocessor:
        mean, scale = self.standardisation(msg)
        return Preprocessor(msg.features, self.log_mask(msg, len(msg.features)), mean, scale, encoding=msg.encoding)

    def imputed(self, msg: R) -> np.ndarray:
        """The transformed training records with unset values at the global mean (as the coordinator's
        statistics assume)."""
        T = self.transformed(self.records(msg), msg)
        missing = np.isnan(T)
        if missing.any():
            T[missing] = np.broadcast_to(self.standardisation(msg)[0], T.shape)[missing]
        return T

    def _stats(self, req: Request) -> Envelope:
        """Count, and per numeric feature the sum and sum of squares of its set values and how many are set
        (transformed); the counts of every text value and unset number (models.detection.encoding)."""
        msg: R = req.msg
        if msg.private or msg.dp:
            return self._count(req)
        spec_schema = RecordSchema(list(msg.features), list(msg.categorical), list(msg.flags))
        self.require_records()
        rows = self.training_rows(msg)
        full = self.buffer.batch()
        X = select(full, spec_schema.numeric, rows=rows)
        # the text fields of the same records (the numbers are not copied twice)
        batch = Batch(full.columns, full.X[:0], text=None if full.text is None or rows is None else
                      {f: v[rows] for f, v in full.text.items()}) if rows is not None else full
        d = X.shape[1]
        total, sumsq, present = np.zeros(d), np.zeros(d), np.zeros(d, dtype=np.int64)
        for i in range(0, len(X), STATS_CHUNK):  # in chunks: a few MB whatever the buffer holds
            T = self.transformed(np.asarray(X[i: i + STATS_CHUNK], dtype=float), msg)
            total += np.nansum(T, axis=0)
            sumsq += np.nansum(T**2, axis=0)
            present += (~np.isnan(T)).sum(axis=0)
        stats = self.statistics(count=np.array([len(X)], dtype=np.int64), total=total, sumsq=sumsq, present=present,
                                counts=batch_counts(batch, spec_schema, numeric=X), **self.stats_extra(msg))
        return req.reply(stats, self.id)

    # -- private mode (coordinator.private_detector): counts in the clear, every statistic as a secure sum ------
    def _count(self, req: Request) -> Envelope:
        """A private job's statistics phase: the records this device trains on (and holds out), nothing more (with
        differential privacy, a roll call)."""
        if req.msg.private:
            require_private()
        self.require_records()
        rows = self.training_rows(req.msg)
        n = len(self.buffer.X) if rows is None else int(np.count_nonzero(rows)) if rows.dtype == bool else len(rows)
        held = self.stats_extra(req.msg).get("held")
        if req.msg.dp:  # differential privacy: a roll call, the device weighs 1 and its count is not released
            n, held = 1, None
        return req.reply(Counted(count=np.array([n], dtype=np.int64), held=held), self.id)

    def secure_values(self, name: str, req: Request) -> dict[str, np.ndarray]:
        """This device's statistics for a private job's sums, by the simulator's own functions
        (models.detection.private): each a batch of one, its row sent."""
        from models.detection.private import (
            COARSE_BINS,
            centred_uploads,
            dense_histograms,
            mean_uploads,
            own_moments,
            tail_uploads,
            window_uploads,
        )

        msg: R = req.msg
        dp = (msg.secagg or {}).get("dp")
        if dp is not None:
            return self.noisy_values(name, req, dp)
        w = np.array([self.weight(req)])
        if name in ("mean", "centred"):
            m1, m2 = own_moments([Moments.of(self.transformed(self.records(msg), msg)).summary()])
            if name == "mean":
                return {k: v[0] for k, v in mean_uploads(w, m1).items()}
            if msg.mean is None:
                raise ValueError("the centred sum's round carries the fleet's mean")
            return {k: v[0] for k, v in centred_uploads(w, m1, m2, np.asarray(msg.mean)).items()}
        if name in ("window", "threshold"):
            extra = msg.secagg or {}
            if name == "threshold":  # the announcement is checked before any work on the records
                window, clip = self.threshold_announcement(extra, COARSE_BINS)
            dense = dense_histograms([sparse_histogram(self.threshold_errors(msg, self.preprocessor(msg)))])
            if name == "window":
                q = extra.get("quantile")
                return {k: v[0] for k, v in window_uploads(dense, w, None if q is None else float(q)).items()}
            return {k: v[0] for k, v in tail_uploads(dense, w, window, clip).items()}
        return self.secure_family_values(name, req, w)

    @staticmethod
    def threshold_announcement(extra: dict[str, Any], coarse_bins: int) -> tuple[tuple[int, int], np.ndarray | None]:
        """The private threshold sum's window and its clip bounds (models.detection.tail_clip), checked."""
        window, bounds = extra.get("window"), extra.get("bounds")
        if window is None:
            raise ValueError("the threshold sum's announcement does not carry its window")
        clip = None if bounds is None else np.asarray(bounds, dtype=float)
        if clip is not None and (clip.shape != (coarse_bins,) or not np.all(clip > 0)):
            raise ValueError(f"the threshold sum's bounds must be {coarse_bins} positive shares")
        return (int(window[0]), int(window[1])), clip

    def secure_family_values(self, name: str, req: Request, w: np.ndarray) -> dict[str, np.ndarray]:
        """The family's own secure sums (PCA: the device's second moment)."""
        raise ValueError(f"a {self.family} agent has no secure sum {name!r}")

    def noisy_values(self, name: str, req: Request, dp: dict) -> dict[str, np.ndarray]:
        """With distributed differential privacy (coordinator.noisy_detector): this device's values for the noisy
        sum `name` (`clear_values`), clipped to the announced clips and with this device's share of the noise added
        (models.private.dp.Noise.device_share), drawn from its own secret stream."""
        from models.private.dp import Ledger

        msg: R = req.msg
        values = self.clear_values(name, req, dp)
        members = len(msg.secagg["names"])  # type: ignore[index]
        noise = Ledger(float(dp["multiplier"]), True, members, 1.0).noise(
            {k: float(v) for k, v in dict(dp["clips"]).items()})
        return noise.device_share(values, members, self.noise_key(req.job), int(dp["index"]))

    def clear_values(self, name: str, req: Request, dp: dict | None = None) -> dict[str, np.ndarray]:
        """This device's values for the noisy sum `name`, weighing 1, by the simulator's own functions
        (models.detection.private); with central noise they are sent as they are (the coordinator clips them)."""
        from models.detection.private import centred_uploads, coarse_shares, exceedances, own_moments

        msg: R = req.msg
        dp = msg.noisy if dp is None else dp
        if dp is None:
            raise ValueError(f"the {msg.phase} round does not carry its noisy sum's announcement")
        if name in ("mean", "centred"):
            m1, m2 = own_moments([Moments.of(self.transformed(self.records(msg), msg)).summary()])
            if name == "mean":
                values = {"m1": m1[0]}
            elif msg.mean is None:
                raise ValueError("the centred sum's round carries the fleet's mean")
            else:
                values = {k: v[0] for k, v in centred_uploads(np.ones(1), m1, m2, np.asarray(msg.mean)).items()}
        elif name in ("anchor", "threshold"):
            histogram = sparse_histogram(self.threshold_errors(msg, self.preprocessor(msg)))
            values = {"h": coarse_shares(histogram)} if name == "anchor" else \
                {"a": exceedances(histogram, float(dp["anchor"]), float(dp["quantile"]))}
        else:
            values = self.noisy_family_values(name, req)
        return values

    def noisy_family_values(self, name: str, req: Request) -> dict[str, np.ndarray]:
        """The family's own noisy sums (PCA: the device's second moment)."""
        raise ValueError(f"a {self.family} agent has no noisy sum {name!r}")

    def threshold_extras(self, msg: R, errors: np.ndarray) -> dict[str, np.ndarray]:
        """The fields a family's histogram message adds (`histogram`)."""
        return {}

    def _threshold(self, req: Request) -> Envelope:
        errors = self.threshold_errors(req.msg, self.preprocessor(req.msg))
        bins, counts = sparse_histogram(errors)
        return req.reply(self.histogram(bins=bins, counts=counts, **self.threshold_extras(req.msg, errors)), self.id)
