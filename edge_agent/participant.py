"""An agent's part in a job, whatever its family: the client side of the round loop, over envelopes.

The coordinator drives a job with retained round messages (meta ``phase``). The base class handles what
every family shares:

- ``train``: a sampled agent first applies `client_finish` owed since the last round it took part in
  (with the broadcast this message carries: the one that followed that round, as in `models.core.rounds`),
  then runs the algorithm's client step (the very function the simulator calls) and uploads. An agent
  that is not sampled only applies an owed finish; with none owed it touches no disk at all.
- Rounds are idempotent: the reply to a (job, phase, round) is stored with the state it produced, in one
  atomic write, and re-sent unchanged if the same round arrives again; a finish is applied once.

A family names its round message (`round_message`, a `models.core.messages.RoundMessage`: every handler is given
the round as that typed message, in a `Request`), and adds its data (`client_data`), the algorithm's problem size
(`problem`) and its other phases (`phases`: statistics, thresholds, evaluation, ...). It is registered in
`models.families`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from edge_agent.store import AgentStore
from models.core.federated import FederatedAlgorithm, State
from models.core.messages import Message, RoundMessage, Upload
from models.families import family
from wire.messages import envelope, read
from wire.protocol import Envelope, decode

OWED = "__finish_owed__"  # the state's client_finish is still to be applied with the next broadcast
REPLY = "__reply__"  # the upload this state produced (encoded envelope)
REPLY_ROUND = "__reply_round__"
PENDING = "__pending_label__"  # private mode: the label of the secure sum a state kept aside was made for


@dataclass
class Request:
    """A round as a participant's handlers see it: the job, the round and the family's typed round message."""

    job: str
    round: int
    msg: Any  # the family's RoundMessage subclass

    def reply(self, message: Message, sender: str) -> Envelope:
        return envelope(message, self.job, self.round, sender)


class Participant(ABC):
    family: ClassVar[str] = ""
    #: the family's round message (what the coordinator's runner of the family sends)
    round_message: ClassVar[type[RoundMessage]] = RoundMessage

    def __init__(self, agent_id: str, store: AgentStore):
        self.id, self.store = agent_id, store
        self._owed: dict[str, bool] = {}  # job -> a finish is owed (known after the first look at the disk)
        # the last state written, of the job written last, as written: a round of that job reads the disk only after
        # a restart (one job's, not every job's since the agent started: a job's state stays on disk, and in
        # memory until the next job's round)
        self._saved: dict[str, dict[str, np.ndarray]] = {}

    # -- what a family provides -------------------------------------------------------------------------
    @abstractmethod
    def phases(self) -> dict[str, Callable[[Request], Envelope | None]]:
        """Handlers of the phases other than ``train``."""

    @abstractmethod
    def client_data(self, req: Request) -> State:
        """This agent's data for the algorithm, as a batch of one."""

    @abstractmethod
    def problem(self, msg: Any) -> dict[str, int]:
        """The dimensions the job's algorithm is built with (n_features or n_items, rank), from the round message."""

    # -- dispatch ---------------------------------------------------------------------------------------
    def on_round(self, env: Envelope) -> Envelope | None:
        """The reply to a round message (None: nothing to send); a round message that does not read as the
        family's is a ProtocolError (a ValueError: the agent declines, saying why)."""
        req = Request(env.job, env.round, read(self.round_message, env))
        phase = req.msg.phase
        if phase == "train":
            if not req.msg.asks(self.id):
                self.settle(req)
                return None
            return self._train_once(req)
        handler = self.phases().get(phase) or (self._secure_step if ":" in phase else None)
        if handler is None:
            return None
        cached = self.answered(env.job, phase, env.round)
        if cached is not None:
            return cached
        reply = handler(req)
        if reply is not None:
            self.store.save_bytes(_reply_key(env.job, phase, env.round), reply.encode())
        return reply

    def answered(self, job: str, phase: str, rnd: int) -> Envelope | None:
        """This device's reply to a round of a phase other than ``train``, as it sent it (None: it sent none)."""
        cached = self.store.load_bytes(_reply_key(job, phase, rnd))
        return None if cached is None else decode(cached)

    # -- private mode: the steps of a secure sum (models.private.relay) ------------------------------------
    def secure_values(self, name: str, req: Request) -> dict[str, np.ndarray]:
        """This device's statistics for the secure sum `name` (a family's private mode says what they are)."""
        raise ValueError(f"a {self.family} agent has no secure sum {name!r}")

    def noise_key(self, job: str) -> list[int]:
        """This device's secret key of its differential-privacy noise in a job (models.private.dp.Noise.
        device_share): drawn once from the system's entropy and kept on the device's disk, so that a sum asked again
        gets the same noise; the coordinator never sees it."""
        name = f"dp-key-{job}"
        key = self.store.load_json(name, None)
        if key is None:
            import secrets

            key = [secrets.randbits(32) for _ in range(4)]
            self.store.save_json(name, key)
        return [int(k) for k in key]

    def advertised(self, req: Request, msg: Any) -> Any:
        """A sum's advertisement with what a family adds to it (the mixture: its support row's commitments and bit
        proofs, models.private.proven)."""
        return msg

    def clear_values(self, name: str, req: Request) -> dict[str, np.ndarray]:
        """This device's values for the sum `name` collected in the clear (a family's differential privacy)."""
        raise ValueError(f"a {self.family} agent has no sum {name!r}")

    def _secure_step(self, req: Request) -> Envelope | None:
        """One step of a secure sum: advertise (this device's values kept with fresh secrets), share, unmask (the
        upload step is driven by the shares routed to this device, `on_routed`). What the device keeps between
        steps is on its own disk."""
        from models.private.relay import Announced, Member

        name, _, step = req.msg.phase.partition(":")
        if not req.msg.asks(self.id):
            return None
        if step == "clear":  # a sum collected in the clear (central noise, coordinator.noisy_detector)
            return req.reply(Upload(arrays=self.clear_values(name, req)), self.id)
        if req.msg.secagg is None:
            raise ValueError(f"the {req.msg.phase} round does not carry its secure sum's announcement")
        announced = Announced.from_meta(req.msg.secagg)
        arrays = req.msg.secagg_arrays
        key = f"secagg-{req.job}"
        if step == "advertise":
            require_private()
            member, msg = Member.advertise(announced, self.id, self.secure_values(name, req))
            msg = self.advertised(req, msg)
            self.store.save_json(key, announced.to_meta())
        elif step == "upload":
            return None
        else:
            member = self._member(req.job, announced.label)
            msg = member.share(arrays["ids"], arrays["keys"]) if step == "share" else \
                member.unmask(arrays["survivors"], arrays["dropped"])
        self.store.save_arrays(key, member.state())
        return req.reply(msg, self.id)

    def _member(self, job: str, label: str) -> Any:
        from models.private.relay import Announced, Member

        meta, state = self.store.load_json(f"secagg-{job}", None), self.store.load_arrays(f"secagg-{job}")
        if meta is None or state is None or meta.get("label") != label:
            raise ValueError(f"this agent did not advertise keys for secure sum {label}")
        return Member.restore(Announced.from_meta(meta), state)

    def on_routed(self, env: Envelope) -> Envelope | None:
        """The secure sum's upload step: the neighbours' shares for this device, routed by the coordinator on the
        device's own topic; the masked upload (re-sent unchanged if the same shares come again)."""
        from models.private.messages import Routed

        key = f"reply-{env.job}-routed-{env.round}.bin"
        cached = self.store.load_bytes(key)
        if cached is not None:
            return decode(cached)
        routed = read(Routed, env)
        member = self._member(env.job, routed.label)
        reply = envelope(member.upload(routed), env.job, env.round, self.id)
        self.store.save_arrays(f"secagg-{env.job}", member.state())
        self.store.save_bytes(key, reply.encode())
        return reply

    # -- private mode: the state a client step made for a sum, kept aside until the sum is known to hold it ------
    def pending_state(self, job: str) -> tuple[State, str]:
        """The state kept aside and the label of its sum (({}, "") when none)."""
        pending = self.store.load_arrays(f"pending-{job}") or {}
        label = bytes(pending.pop(PENDING, np.zeros(0, np.uint8))).decode()
        return pending, label

    def keep_pending(self, job: str, state: State, label: str) -> None:
        """Keep the state this device's client step made for the sum `label` aside (`commit_counted`)."""
        self.store.save_arrays(f"pending-{job}", {**state, PENDING: np.frombuffer(label.encode(), np.uint8)})

    def commit_counted(self, job: str, counted: dict[str, str] | None, owed: bool,
                       finish: Callable[[State, str], State] | None = None) -> None:
        """Commit the state kept aside if `counted` (the coordinator's: the label of the last sum whose total holds
        each device's upload) names its sum for this device, with its finish `owed` or not, and through `finish`
        (given the sum's label) if any; drop it otherwise (the device left before uploading, or the sum failed)."""
        pending, label = self.pending_state(job)
        if pending:
            if (counted or {}).get(self.id) == label:
                self.save_state(job, pending if finish is None else finish(pending, label), owed)
            self.store.save_arrays(f"pending-{job}", {})

    # -- the algorithm and its state ----------------------------------------------------------------------
    def algorithm(self, msg: Any) -> FederatedAlgorithm:
        cls = family(self.family).algorithms[msg.algorithm]
        return cls(**self.problem(msg), **msg.params)

    def load_state(self, job: str) -> tuple[State | None, dict[str, np.ndarray]]:
        """(the algorithm's state, bookkeeping arrays) of a job, or (None, {})."""
        arrays = self._saved.get(job)
        if arrays is None:
            arrays = self.store.load_arrays(f"job-{job}")
            if arrays is None:
                return None, {}
            self._saved = {job: arrays}
        arrays = dict(arrays)
        book = {k: arrays.pop(k) for k in (OWED, REPLY, REPLY_ROUND) if k in arrays}
        return arrays, book

    def save_state(self, job: str, state: State, owed: bool, book: dict[str, np.ndarray] | None = None) -> None:
        arrays = {**state, **(book or {}), OWED: np.array(owed)}
        self.store.save_arrays(f"job-{job}", arrays)
        self._saved = {job: arrays}
        self._owed[job] = owed

    def settle(self, req: Request) -> None:
        """Apply an owed finish (a train round this agent is not sampled in); no disk access when none is
        owed."""
        if self._owed.get(req.job) is not False:
            self.current_state(req)

    def current_state(self, req: Request) -> State | None:
        """The job's state with any owed finish applied (with this message's broadcast)."""
        state, book = self.load_state(req.job)
        if state is not None and bool(book.get(OWED, False)):
            state = self.algorithm(req.msg).client_finish(state, req.msg.broadcast)
            self.save_state(req.job, state, False, book)
        self._owed[req.job] = False
        return state

    def _train_once(self, req: Request) -> Envelope | None:
        _, book = self.load_state(req.job)
        answered = int(book.get(REPLY_ROUND, -1))
        if answered == req.round and REPLY in book:
            return decode(book[REPLY].tobytes())  # a redelivered round: the same answer, nothing applied
        if answered > req.round:
            return None  # an old round delivered late: already past it
        return self._train(req)

    def _train(self, req: Request) -> Envelope | None:
        """Finish owed, client step, upload; the state and the reply are written in one atomic step."""
        alg, broadcast = self.algorithm(req.msg), req.msg.broadcast
        state, book = self.load_state(req.job)
        if state is not None and bool(book.get(OWED, False)):
            state = alg.client_finish(state, broadcast)
        data = self.client_data(req)
        if state is None:
            state = alg.init_clients(data, req.msg.init or broadcast)
        state, upload = alg.client_update(state, data, broadcast)
        reply = req.reply(Upload(arrays={k: v[0] for k, v in upload.items()}), self.id)
        self.save_state(req.job, state, True, {REPLY: np.frombuffer(reply.encode(), dtype=np.uint8),
                                               REPLY_ROUND: np.array(req.round)})
        return reply


def _reply_key(job: str, phase: str, rnd: int) -> str:
    return f"reply-{job}-{phase}-{rnd}.bin"


def require_private() -> None:
    """Private mode needs the `private` extra; an agent without it declines a private job saying so."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ValueError("this job runs in private mode, which needs the 'cryptography' package: pip install "
                         "'fedsentry[private]' on this device") from None
