"""The round machinery every job shares: phases, sampling, deadlines, validation, persistence, resume.

A job is a sequence of phases, each made of rounds driven by a retained message on the job's topic.
Subclasses say what a phase broadcasts (`content`), what a reply must look like (`validate`), what
closing a round does (`close`) and what follows (`follow`); they contain no algorithm math, only calls
to the algorithm's server steps.

After each completed round the whole resumable state (server arrays, the generator's state, the
broadcast) is written in the same transaction as the round's record, so a coordinator killed at any
moment resumes from the last completed round and samples exactly the same clients again.
"""

from __future__ import annotations

import hashlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from models.core.federated import FederatedAlgorithm
from models.core.messages import Decline, MessageType, RoundMessage
from models.core.sampling import EVERYONE, Draw, listed, sample
from models.families import job_spec
from store import row_tables
from store.db import Device, Job, JobState, ModelVersion, Round, RoundUpload, pack, unpack, utcnow
from store.records import insert_for
from store.round_record import round_row
from wire.messages import envelope, read
from wire.protocol import Envelope, ProtocolError, agent_topic, decode

log = logging.getLogger("fedsentry.coordinator")


#: characters of an agent's reason for declining that are kept
MAX_REASON = 300
#: seconds after which an open round's message is published again: on a clustered broker retained messages are kept
#: per node (RabbitMQ), so an agent that joins another node mid-round hears the round then
REPUBLISH_S = 30.0


@dataclass(frozen=True)
class Phase:
    """One phase of a job's table: its name (the round message's and the agents' handler's), how many rounds it
    has, and whether each round asks a seeded share of the participants (the job's fraction) or all of them."""

    name: str
    rounds: int = 1
    sampled: bool = False


class JobRunner(ABC):
    type: str = ""
    #: phase -> the message a reply to it is (`models.core.messages`: typed, versioned)
    replies: ClassVar[dict[str, MessageType]] = {}

    def __init__(self, job: Job, sessions: sessionmaker, publish: Callable[[str, bytes, bool], None],
                 job_topic: str):
        self.job_id = job.id
        self.spec = job_spec(job.type, {**job.params, "algorithm": job.algorithm})
        self.algorithm_name = self.spec.algorithm
        self.sessions, self.publish, self.job_topic = sessions, publish, job_topic
        self.deadline_s = float(self.spec.deadline)
        self.phase = "waiting"
        self.round = 0
        self.participants: list[str] = []
        self.info: dict[str, Any] = {}
        self.server: dict[str, np.ndarray] = {}
        self.broadcast: dict[str, np.ndarray] = {}
        self.pending: dict[str, Any] = {}  # sender -> its reply to this round (the phase's message)
        self.declined: dict[str, str] = {}  # this round's agents that said they cannot take part, and why
        self.refused: dict[str, str] = {}  # this round's agents whose answer was refused on arrival, and why
        #: a digest of each accepted answer as sent, this round's and the last one's: the same answer sent again
        #: (after a takeover, or a re-published round) is acknowledged, not refused
        self.digests: dict[str, bytes] = {}
        self.previous: dict[str, bytes] = {}
        #: accepted answers not yet in round_uploads: (device, payload as sent)
        self.unsaved: list[tuple[str, bytes]] = []
        #: answers this round that repeated an accepted one (a resend after a takeover or a re-published round)
        self.repeated = 0
        #: answers to this round an earlier leader had stored (round_uploads)
        self.restored = 0
        #: answers to this round ingest workers stored after it began (coordinator.upload_queue), and the devices
        #: whose stored answer was taken (accepted or refused), so none is read twice
        self.queued = 0
        self.taken: set[str] = set()
        self.sampled: list[str] = []
        #: the open round's draw above the switch (models.core.sampling), None while rounds list their devices
        self.draw: Draw | None = None
        self.started_at = self.deadline = self.published_at = 0.0
        self.republish_s = REPUBLISH_S
        self.message = b""  # the open round's message, as published
        self.rng: np.random.Generator | None = None
        #: rows of the row tables changed since the last save (None: all, as after the statistics phase)
        self.touched: dict[str, np.ndarray] | None = None
        #: each participant's record count (from the statistics phase), and whether the stored row has them
        self.counts: list[float] = []
        self.roster_saved = False
        #: the coordinator instance leading the job (jobs.leader): a save made after another took over fails
        #: (LeadershipLostError) instead of overwriting the new leader's state
        self.leader: str | None = None
        self._index: dict[str, int] = {}
        self._asked: tuple[list[str], frozenset[str]] = ([], frozenset())
        self._weights = np.zeros(0)

    # -- what a job type decides ----------------------------------------------------------------------
    @classmethod
    def model_payload(cls, mv: ModelVersion) -> bytes | None:
        """What to publish, retained, when a model version of this family is promoted (None: nothing;
        the API serves it)."""
        return None

    def algorithm(self) -> FederatedAlgorithm:
        return self.spec.make_algorithm()

    @abstractmethod
    def content(self, phase: str, header: dict[str, Any]) -> RoundMessage:
        """The round message of `phase`: the family's round message class, given the header every round carries
        (phase, type, sampled, algorithm) and the family's own fields."""

    @abstractmethod
    def validate(self, msg: Any, sender: str) -> None:
        """Raise ProtocolError for a reply (the phase's message, read) that must not touch the model."""

    @abstractmethod
    def close(self, answered: list[str]) -> dict[str, Any]:
        """Aggregate the replies of the round just closed; return its metrics."""

    @abstractmethod
    def phase_table(self) -> list[Phase]:
        """The job's phases in order, each with its number of rounds and who takes part (`Phase`)."""

    def follow(self) -> None:
        """Start what comes after the last completed round: the next round of this phase, the first of the next
        phase with rounds (round numbers run on across phases: the statistics phase is round 0), or `finish`."""
        start = 0
        table = [p for p in self.phase_table() if p.rounds > 0]
        for k, p in enumerate(table):
            end = start + p.rounds  # this phase's rounds are start .. end - 1
            if p.name == self.phase:
                if self.round + 1 < end:
                    nxt, rnd = p, self.round + 1
                elif k + 1 < len(table):
                    nxt, rnd = table[k + 1], end
                else:
                    self.finish()
                    return
                break
            start = end
        else:
            raise RuntimeError(f"job {self.job_id}: phase {self.phase!r} is not in its phase table")
        if nxt.sampled:
            self.sample(nxt.name, rnd)
        else:
            self.begin(nxt.name, rnd, self.asked(nxt.name))

    def asked(self, phase: str) -> list[str]:
        """Who a round of a phase that samples nobody asks: every participant (a secure sum's later steps, those
        that answered its step before)."""
        return self.participants

    def reply_type(self, phase: str) -> MessageType | None:
        """The message a reply to `phase` is."""
        return self.replies.get(phase)

    def finish(self) -> None:
        """What the job does after its last round (a family stores and promotes its model here)."""
        self.phase = "finished"
        self.set_job(status="finished", phase="finished")

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, online: list[str], announced: dict[str, tuple[str, ...]] | None = None) -> None:
        """Begin with the devices online now (or resume from the stored state). `announced`: the numeric
        features each device said its records have (its status message)."""
        with self.sessions() as s:
            st = s.get(JobState, self.job_id)
        if st is not None:
            self.round, self.phase = st.round, st.phase
            self.participants, self.info = list(st.participants), dict(st.info)
            self.counts, self.roster_saved = list(st.counts or []), True
            with self.sessions() as s:
                self.server = self.load_server(s, unpack(st.server))
            self.broadcast = unpack(st.broadcast)
            self.touched = {}
            if "rng" in self.info:
                self.rng = np.random.default_rng()
                self.rng.bit_generator.state = self.info["rng"]
            log.info("job=%s resuming after round=%s phase=%s", self.job_id, self.round, self.phase)
            self.follow()
            return
        if len(online) < self.spec.min_agents:
            return
        self.participants = sorted(online)[: self.spec.max_agents or None]
        problem = self.settle(announced or {})
        if problem:
            self.fail(problem)
            return
        self.begin("stats", 0, self.participants)

    def needs(self) -> frozenset[str]:
        """What the job's settings need of a device's program (wire.protocol.ABILITIES): a differentially private
        job takes only agents that add their share of the noise; an agent that does not say so is left out."""
        return frozenset({"dp"}) if getattr(self.spec, "dp_epsilon", None) is not None else frozenset()

    def settle(self, announced: dict[str, tuple[str, ...]]) -> str | None:
        """Settings a job leaves to its participants, decided now that they are known; why the job cannot
        start otherwise (None: it can)."""
        return None

    def lists_devices(self) -> bool:
        """Whether every round message lists the devices it asks, whatever the fleet's size (a secure sum names its
        members to each other)."""
        return False

    def who(self, sampled: list[str], draw: Draw | None) -> Draw | None:
        """How the round message names the devices it asks: None, by listing them; else the draw each device tests
        itself against (a phase that asks every participant: the draw that asks everyone)."""
        if self.lists_devices() or (draw is None and listed(len(sampled))):
            return None
        if draw is None and len(sampled) != len(self.participants):
            raise RuntimeError(f"job {self.job_id}: a round above the switch that is neither drawn nor asks every "
                               f"participant ({len(sampled)} of {len(self.participants)})")
        return draw or EVERYONE

    def begin(self, phase: str, rnd: int, sampled: list[str], draw: Draw | None = None) -> None:
        """Start a round asking these devices (`draw`: the draw that chose them, above the switch)."""
        self.phase, self.sampled, self.pending, self.declined = phase, sampled, {}, {}
        self.draw = self.who(sampled, draw)
        self.previous = self.digests if rnd == self.round + 1 else {}
        self.refused, self.digests, self.unsaved, self.repeated, self.restored = {}, {}, [], 0, 0
        self.taken, self.queued = set(), 0
        self.round = rnd
        self.started_at = time.monotonic()
        self.deadline = self.started_at + self.deadline_s
        named = {"sampled": sampled} if self.draw is None else {"salt": self.draw.salt, "bound": self.draw.bound}
        msg = self.content(phase, {"phase": phase, "type": self.type, **named, "algorithm": self.algorithm_name})
        self.message = envelope(msg, self.job_id, rnd, "coordinator").encode()
        # the round is written before it is published: an ingest worker storing answers (coordinator.upload_queue)
        # reads the round a job is in from its row, and no device can answer a round before that
        self.set_job(status="running", phase=phase, current_round=rnd)
        self.publish(self.job_topic, self.message, True)
        self.published_at = self.started_at
        log.info("job=%s round=%s phase=%s sampled=%d", self.job_id, rnd, phase, len(sampled))
        self.restored = self.take_stored()
        if self.restored:
            log.info("job=%s round=%s took %d stored answers", self.job_id, self.round, self.restored)

    def sample(self, phase: str, rnd: int) -> None:
        """Start a round with the job's seeded share of the participants."""
        assert self.rng is not None, "sampling before the statistics phase set the job's generator"
        idx, draw = sample(self.rng, self.participants, self.spec.fraction)
        self.begin(phase, rnd, [self.participants[i] for i in idx], draw)

    def asks(self, device: str) -> bool:
        """Whether the open round asked the device (a set of `sampled`, made once a round)."""
        if self._asked[0] is not self.sampled:
            self._asked = (self.sampled, frozenset(self.sampled))
        return device in self._asked[1]

    def index(self) -> dict[str, int]:
        """Each participant's position (in the participants list, the counts and the server's tables)."""
        if len(self._index) != len(self.participants):
            self._index = {a: i for i, a in enumerate(self.participants)}
        return self._index

    def device_weights(self, counts: np.ndarray) -> np.ndarray:
        """Each participant's weight from its record count (mean 1); families may cap them."""
        return counts / counts.mean()

    def weights(self, answered: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Participant indices and weights (from the statistics phase's counts) of those who answered."""
        index = self.index()
        ids = np.array([index[a] for a in answered], dtype=int)
        if len(self._weights) != len(self.counts):
            self._weights = self.device_weights(np.array(self.counts, dtype=float))
        return ids, self._weights[ids]

    # -- messages -------------------------------------------------------------------------------------
    def accept(self, env: Envelope, payload: bytes | None = None, stored: bool = False) -> bool:
        """Validate a reply for this job (`payload`: as the device sent it); raise ProtocolError (with a reason) to
        reject it. False: the same answer again from a device whose answer is accepted already (nothing changes);
        True: accepted, and to be stored (`store_uploads`) unless it comes from round_uploads (`stored`)."""
        digest = hashlib.sha256(payload).digest() if payload is not None else None
        if digest is not None and digest == {self.round: self.digests, self.round - 1: self.previous}.get(
                env.round, {}).get(env.sender):
            self.repeated += 1
            return False
        if env.round < self.round:
            raise ProtocolError("stale", f"round {env.round} < current {self.round}")
        if env.round > self.round:
            raise ProtocolError("future", f"round {env.round} > current {self.round}")
        reply = self.reply_type(self.phase)
        if reply is None or env.kind not in (reply.kind, Decline.kind):
            raise ProtocolError("kind", f"{env.kind} during phase {self.phase}")
        if not self.asks(env.sender):
            raise ProtocolError("not_sampled", f"{env.sender} was not asked in round {self.round}")
        if env.kind == Decline.kind:  # the agent cannot take part (e.g. its data lacks the job's features): why
            try:
                reason = read(Decline, env).reason
            except ProtocolError:
                reason = None
            if not reason or env.sender in self.pending:
                raise ProtocolError("decline", "a decline carries its reason as text, instead of an answer")
            self.declined[env.sender] = printable(reason)
            log.warning("job=%s round=%s agent=%s declined: %s", self.job_id, self.round, env.sender,
                        self.declined[env.sender])
            return False
        try:  # the content first: garbage is reported as such even when it repeats an answer
            msg = read(reply, env)
            self.validate(msg, env.sender)
        except ProtocolError as e:
            if env.sender not in self.pending:  # what the operator sees for this device in this round
                self.refused[env.sender] = printable(f"{e.reason}: {e.detail}")
            raise
        if env.sender in self.pending:
            raise ProtocolError("duplicate", f"{env.sender} already answered round {self.round}")
        self.pending[env.sender] = msg
        if digest is not None:
            self.digests[env.sender] = digest
            if not stored and self.keeps_answers():
                self.unsaved.append((env.sender, bytes(payload or b"")))
        return True

    def keeps_answers(self) -> bool:
        """Whether this round's accepted answers are stored (round_uploads) for a coordinator taking the job over;
        not those that must never be saved (the shares a secure sum reveals)."""
        return True

    def store_uploads(self) -> int:
        """Store the answers accepted since the last call (fenced, one transaction), so that a coordinator that
        takes the job over closes this round with them; the caller acknowledges their messages after this."""
        if not self.unsaved:
            return 0
        rows = list(self.unsaved)
        with self.sessions.begin() as s:
            self.fence(s)
            s.execute(insert_for(s)(RoundUpload).on_conflict_do_nothing(), [
                {"job_id": self.job_id, "round": self.round, "device": device, "phase": self.phase,
                 "payload": payload} for device, payload in rows])
        del self.unsaved[:len(rows)]  # only once committed: the database being down keeps them for the next try
        return len(rows)

    def take_stored(self, refuse: Callable[[str, str, str], object] | None = None) -> int:
        """Take the answers to this round stored and not taken yet (an earlier leader's, or the ingest workers'
        when answers go through the queue) as if they came now: nothing stored is asked for again. An answer
        refused is counted by `refuse` (reason, detail, topic), or logged. Returns how many were accepted."""
        where = (RoundUpload.job_id == self.job_id, RoundUpload.round == self.round, RoundUpload.phase == self.phase)
        with self.sessions() as s:
            new = [d for d in s.scalars(select(RoundUpload.device).where(*where)) if d not in self.taken]
            rows = list(s.execute(select(RoundUpload.device, RoundUpload.payload).where(
                *where, RoundUpload.device.in_(new)))) if new else []
        accepted = 0
        for device, payload in rows:
            self.taken.add(device)
            try:
                env = decode(payload)
                if env.sender != device:
                    raise ProtocolError("sender", f"stored answer of {device!r} names {env.sender!r}")
                accepted += self.accept(env, payload, stored=True)
            except ProtocolError as e:
                if refuse is None:
                    log.warning("job=%s round=%s stored answer of %s not taken: %s", self.job_id, self.round,
                                device, e)
                else:
                    refuse(e.reason, e.detail, agent_topic(device, "upload"))
        return accepted

    def tick(self) -> bool:
        """Close the round if everyone answered or the deadline passed; True when the job is over."""
        if self.phase in ("waiting", "finished", "failed"):
            return self.phase in ("finished", "failed")
        now = time.monotonic()
        if len(self.pending) + len(self.declined) < len(self.sampled) and now < self.deadline:
            if now - self.published_at >= self.republish_s:  # not every node of a cluster keeps it retained
                self.publish(self.job_topic, self.message, True)
                self.published_at = now
            return False
        answered = [a for a in self.sampled if a in self.pending]
        seconds = time.monotonic() - self.started_at
        metrics: dict[str, Any] = {"sampled": len(self.sampled), "answered": len(answered),
                                   "dropouts": len(self.sampled) - len(answered)}
        if self.declined:
            metrics["declined"] = dict(self.declined)
        for name in ("restored", "queued", "repeated"):
            if getattr(self, name):
                metrics[name] = getattr(self, name)
        metrics.update(self.close(answered))
        if self.refused:
            metrics.setdefault("influence", {}).setdefault("refused", {}).update(self.refused)
        if self.phase == "failed":
            return True
        self.save(round_row(self.job_id, self.round, self.phase, self.sampled, answered, self.draw, metrics, seconds),
                  answered)
        self.follow()
        return self.phase in ("finished", "failed")

    def fail(self, why: str) -> None:
        """Fail the job, with what the agents that declined this round said (the reason is on the devices
        otherwise: a job naming features the agents lack would only say that nobody answered)."""
        if self.declined:
            reasons: dict[str, list[str]] = {}
            for agent, reason in sorted(self.declined.items()):
                reasons.setdefault(reason, []).append(agent)
            said = "; ".join(f"{', '.join(a[:3])}{' and others' if len(a) > 3 else ''}: {r}"
                             for r, a in reasons.items())
            why = f"{why}; agents that declined said: {said}"
        self.phase = "failed"
        self.set_job(status="failed", phase="failed", error=why[:500])
        log.error("job=%s failed: %s", self.job_id, why)

    # -- persistence ----------------------------------------------------------------------------------
    def save(self, rnd: Round, answered: list[str]) -> None:
        """The round's record and the resumable state, in one transaction (`answered`: who answered it). Arrays that
        grow with the federation (the algorithm's row tables) are written as chunks, only those holding changed
        rows."""
        if self.rng is not None:
            self.info["rng"] = self.rng.bit_generator.state
        alg = self.algorithm()
        tables = [k for k in alg.row_tables if k in self.server] if self.server else []
        lengths = alg.table_lengths(self.server) if self.server else {}
        self.info["row_tables"] = row_tables.describe(self.server, tables, lengths)
        small = {k: v for k, v in self.server.items() if k not in tables}
        with self.sessions.begin() as s:
            self.fence(s)
            s.merge(rnd)
            if self.roster_saved:  # participants and counts (as long as the federation) are stored already
                s.execute(update(JobState).where(JobState.job_id == self.job_id).values(
                    round=self.round, phase=self.phase, info=_jsonable(self.info), server=pack(small),
                    broadcast=pack(self.broadcast)))
            else:
                s.merge(JobState(job_id=self.job_id, round=self.round, phase=self.phase,
                                 participants=self.participants, counts=self.counts, info=_jsonable(self.info),
                                 server=pack(small), broadcast=pack(self.broadcast)))
            row_tables.store(s, self.job_id, row_tables.changed(self.server, tables, self.touched, lengths))
            s.execute(delete(RoundUpload).where(RoundUpload.job_id == self.job_id, RoundUpload.round <= rnd.round))
            if answered:  # one statement for every device that answered
                s.execute(update(Device).where(Device.id.in_(list(answered)))
                          .values(rounds=Device.rounds + 1, last_seen=utcnow()))
        self.touched = {}
        self.roster_saved = True
        self.unsaved = []  # the closed round's answers are in the state just saved

    def load_server(self, s: Session, small: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The server state as saved: the small arrays and the row tables rebuilt from their chunks."""
        return {**small, **row_tables.load(s, self.job_id, self.info.get("row_tables", {}))}

    def fence(self, s: Session) -> None:
        """Raise LeadershipLostError unless this runner's coordinator still leads the job; on PostgreSQL the row stays
        locked until the caller's transaction ends, so no takeover slips in before its writes."""
        if self.leader is None:
            return
        same = getattr(s.execute(update(Job).where(Job.id == self.job_id, Job.leader == self.leader)
                                 .values(leader=self.leader)), "rowcount", 0)
        if not same:
            raise LeadershipLostError(f"job {self.job_id} is led by another coordinator now")

    def set_job(self, **fields: Any) -> None:
        with self.sessions.begin() as s:
            self.fence(s)
            job = s.get(Job, self.job_id)
            for k, v in fields.items():
                setattr(job, k, v)


class LeadershipLostError(Exception):
    """Another coordinator leads the job now: this one stops, writing nothing."""


def printable(text: str) -> str:
    """A device's words as the operator may see them: printable characters, at most MAX_REASON of them."""
    return "".join(c if c.isprintable() else " " for c in text)[:MAX_REASON]


def _jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _jsonable(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.generic):
        return o.item()
    return o
