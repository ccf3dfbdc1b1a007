"""Private mode on the coordinator: a job's secure sums, each run as four rounds of the job (models.private.relay),
with the deadlines, saved state and resume every round has (coordinator.job_runner).

A secure sum named S is the phases "S:advertise", "S:share", "S:upload", "S:unmask" of the job's table. Who is asked
narrows from step to step: every participant to advertise, those that advertised to share, those that shared to
upload (each receives its neighbours' encrypted shares on its own topic, retained until the sum is done), those
that uploaded to unmask. A device that drops after its upload still counts (its self-mask is rebuilt from its
neighbours' shares). A sum that cannot be decoded (too few devices left, an altered share) counts for nothing and
starts again from its advertise step with fresh keys, at most ATTEMPTS times; then the job fails, naming why. The
job saves, after each step, only what the coordinator may know (models.private.relay.Relay.state): no share it is
shown is kept.

A job says what each sum is (`announce`: its statistics' shapes and scales, the clip and ring) and what its decoded
total gives (`summed`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from coordinator.job_runner import JobRunner
from models.core.messages import MessageType
from models.core.sampling import Draw
from wire.messages import envelope
from wire.protocol import ProtocolError, agent_topic

log = logging.getLogger("fedsentry.coordinator")

#: the server-state keys of the sum in progress (what the coordinator may know of it)
PREFIX = "secagg."
#: how many times a secure sum is tried before the job fails
ATTEMPTS = 3


def step_of(phase: str) -> tuple[str, str] | None:
    """(sum, step) of a secure sum's phase, None for any other phase."""
    name, _, step = phase.partition(":")
    return (name, step) if step else None


def never_stored(phase: str) -> bool:
    """Whether the answers of a phase must never be stored: the shares revealed to unmask a secure sum are used to
    decode it and dropped (a coordinator taking over asks for them again)."""
    at = step_of(phase)
    return at is not None and at[1] == "unmask"


class SecureSums(JobRunner):
    """The step logic of a job's secure sums (a job runner that has some mixes this in)."""

    _relay: Any = None

    def announce(self, name: str, rnd: int, members: list[str]) -> Any:
        """The announcement (models.private.relay.Announced) of the secure sum `name` of these devices, begun in
        round `rnd`."""
        raise NotImplementedError

    def summed(self, name: str, total: dict[str, np.ndarray], members: list[str]) -> dict[str, Any]:
        """Take the decoded sum of `name` (each statistic with a leading axis of 1) over the devices whose uploads
        it holds; the round's metrics."""
        raise NotImplementedError

    # -- what the runner asks -------------------------------------------------------------------------
    def keeps_answers(self) -> bool:
        """The shares revealed to unmask a sum are used to decode it and never saved (a coordinator taking over asks
        for them again); every other answer is kept until its round closes."""
        return not never_stored(self.phase)

    def reply_type(self, phase: str) -> MessageType | None:
        at = step_of(phase)
        if at is None:
            return super().reply_type(phase)
        from models.private.relay import REPLIES

        return REPLIES.get(at[1])

    def relay(self) -> Any:
        """The sum in progress, restored from the saved state after a restart."""
        if self._relay is None:
            from models.private.relay import Announced, Relay

            announced = Announced.from_meta(self.info["secagg"])
            if f"{PREFIX}shared" in self.server:
                self._relay = Relay.restore(announced, {k[len(PREFIX):]: v for k, v in self.server.items()
                                                        if k.startswith(PREFIX)})
            else:
                self._relay = Relay(announced)
        return self._relay

    def asked(self, phase: str) -> list[str]:
        at = step_of(phase)
        if at is None or at[1] == "advertise":
            return super().asked(phase)
        relay = self.relay()
        names = relay.announced.names
        if at[1] == "share":
            return [names[i] for i in sorted(relay.server.keys)]
        if at[1] == "upload":
            return [names[i] for i in sorted(relay.server.shared)]
        return [names[i] for i in sorted(relay.server.uploaded)]

    def begin(self, phase: str, rnd: int, sampled: list[str], draw: Draw | None = None) -> None:
        at = step_of(phase)
        if at is not None and at[1] == "advertise" and len(sampled) < 2:
            self.fail(f"secure sum {at[0]!r} would sum {len(sampled)} device(s); a secure sum needs at least 2 "
                      "(raise the share sampled, or the devices)")
            return
        if at is not None and at[1] == "advertise":  # a new sum (or the same again after a restart)
            self._relay = None
            self.server = {k: v for k, v in self.server.items() if not k.startswith(PREFIX)}
            self.info["secagg"] = self.announce(at[0], rnd, sampled).to_meta()
        super().begin(phase, rnd, sampled, draw)
        if at is not None and at[1] == "upload":  # each device's incoming shares, on its own topic
            relay = self.relay()
            for i, msg in relay.routed_messages().items():
                name = relay.announced.names[i]
                self.publish(agent_topic(name, "secagg"), envelope(msg, self.job_id, rnd, "coordinator").encode(),
                             True)

    def fail(self, why: str) -> None:
        """Fail the job; the shares routed for a sum in progress are cleared from the devices' topics."""
        for name in (self.info.get("secagg") or {}).get("names", []):
            self.publish(agent_topic(name, "secagg"), b"", True)
        super().fail(why)

    def secure_fields(self, phase: str) -> dict[str, Any]:
        """What a step's round message carries: the announcement and the step, and the step's arrays."""
        at = step_of(phase)
        if at is None:
            return {}
        relay = self.relay()
        arrays: dict[str, np.ndarray] = {}
        if at[1] == "share":
            arrays = relay.keys_arrays()
        elif at[1] == "unmask":
            survivors = np.array(sorted(relay.server.uploaded), dtype=np.int64)
            arrays = {"survivors": survivors,
                      "dropped": np.array(sorted(relay.server.shared - set(relay.server.uploaded)), dtype=np.int64)}
        extra = self.advertise_extra(at[0]) if at[1] == "advertise" else {}
        return {"secagg": {**relay.announced.to_meta(), "step": at[1], **extra}, "secagg_arrays": arrays}

    def advertise_extra(self, name: str) -> dict[str, Any]:
        """What a sum's advertise round tells its devices besides the announcement (the mixture: which of their
        last uploads counted)."""
        return {}

    def keep_advertised(self, name: str, replies: dict[int, Any]) -> None:
        """Keep what a sum's advertisements carry besides keys (by position; the mixture: its devices' support
        commitments, models.private.proven), in the server state: saved with the step."""

    def validate_step(self, msg: Any, sender: str) -> None:
        """Refuse a step's answer that does not fit the sum (wrong sizes, shares for devices that are not the
        sender's neighbours), naming what is wrong."""
        from models.private.messages import Advertised, Masked, Revealed, Shares
        from models.private.relay import KEYS_BYTES
        from models.private.secagg import SecAggError

        relay = self.relay()
        try:
            if isinstance(msg, Advertised):
                if msg.keys.shape != (KEYS_BYTES,) or msg.keys.dtype != np.uint8:
                    raise SecAggError(f"an advertisement is {KEYS_BYTES} bytes, got {msg.keys.shape} {msg.keys.dtype}")
            elif isinstance(msg, Shares):
                relay.check_shares(relay.announced.names.index(sender), msg)
            elif isinstance(msg, Masked):
                relay.check_upload(msg)
            elif isinstance(msg, Revealed):
                relay.check_reveal(msg)
        except SecAggError as e:
            raise ProtocolError("value", str(e)) from None

    def close_step(self, answered: list[str]) -> dict[str, Any]:
        """Close a step: keep what it brought; after the last, decode the sum and hand it to the job."""
        from models.private.secagg import SecAggError

        name, step = step_of(self.phase) or ("", "")
        relay = self.relay()
        position = {n: i for i, n in enumerate(relay.announced.names)}
        replies = {position[a]: self.pending[a] for a in answered}
        out: dict[str, Any] = {"secure_sum": name, "step": step}
        try:
            if step == "advertise":
                relay.advertised(replies)
                self.keep_advertised(name, replies)
                if len(replies) < relay.server.setup.threshold:
                    raise SecAggError(f"{len(replies)} devices advertised keys; the sum needs at least "
                                      f"{relay.server.setup.threshold}")
            elif step == "share":
                relay.shared(replies)
            elif step == "upload":
                out["dropped_after_sharing"] = len(relay.uploaded(replies)["dropped"])
            else:
                total = relay.finish(replies)
                members = [relay.announced.names[i] for i in sorted(relay.server.uploaded)]
                out["survivors"] = len(members)
                done = self.info.setdefault("sums", {})
                done[name] = done.get(name, 0) + 1
                self.info.get("attempts", {}).pop(name, None)
                for n in relay.announced.names:  # the routed shares are of no more use
                    self.publish(agent_topic(n, "secagg"), b"", True)
                self.server = {k: v for k, v in self.server.items() if not k.startswith(PREFIX)}
                self._relay = None
                out.update(self.summed(name, total, members))
                self.info.pop("secagg", None)
                return out
        except SecAggError as e:
            return {**out, **self.failed_sum(name, step, str(e))}
        self.server.update({PREFIX + k: v for k, v in relay.state().items()})
        return out

    def failed_sum(self, name: str, step: str, why: str) -> dict[str, Any]:
        """A sum that cannot be decoded: nothing of it counts. It starts again from its advertise step with the same
        devices and fresh keys (a new round, a new label: no secret of the failed attempt is used again), at most
        ATTEMPTS times; then the job fails, naming the sum, the step and why."""
        attempts = self.info.setdefault("attempts", {})
        attempts[name] = attempts.get(name, 0) + 1
        reason = f"secure sum {name!r} failed at its {step} step: {why}"
        if attempts[name] >= ATTEMPTS:
            self.fail(f"{reason} ({ATTEMPTS} attempts)")
            return {}
        log.warning("job=%s round=%s %s; starting it again (attempt %d of %d)", self.job_id, self.round, reason,
                    attempts[name] + 1, ATTEMPTS)
        names = list(self.relay().announced.names)
        for n in names:
            self.publish(agent_topic(n, "secagg"), b"", True)
        self.server = {k: v for k, v in self.server.items() if not k.startswith(PREFIX)}
        self._relay = None
        self.info["retry"] = {"name": name, "members": names}
        return {"failed": reason, "attempt": attempts[name]}

    def next_step(self) -> bool:
        """Begin a failed sum again, else the next step of the sum in progress; False if neither (the phase is a sum's
        last step, or no sum's)."""
        from models.private.relay import STEPS

        if self.retried():
            return True
        at = step_of(self.phase)
        if at is None or at[1] not in STEPS[:-1]:
            return False
        phase = f"{at[0]}:{STEPS[STEPS.index(at[1]) + 1]}"
        self.begin(phase, self.round + 1, self.asked(phase))
        return True

    def retried(self) -> bool:
        """Start a failed sum again (its advertise step) if one waits; True if so."""
        retry = self.info.pop("retry", None)
        if retry is None:
            return False
        self.begin(f"{retry['name']}:advertise", self.round + 1, list(retry["members"]))
        return True
