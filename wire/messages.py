"""Typed messages (`models.core.messages`) in and out of envelopes: the envelope's kind is the message's, its
arrays and meta the message's parts. A message that does not read as its class is a ProtocolError with the
message's reason, counted like every refusal."""

from __future__ import annotations

from typing import TypeVar

from models.core.messages import Message, MessageError
from wire.protocol import Envelope, ProtocolError

M = TypeVar("M", bound=Message)


def envelope(msg: Message, job: str, rnd: int, sender: str) -> Envelope:
    arrays, meta = msg.parts()
    return Envelope(msg.kind, job, rnd, sender, arrays, meta)


def read(cls: type[M], env: Envelope) -> M:
    if env.kind != cls.kind:
        raise ProtocolError("kind", f"expected a {cls.kind} message, got {env.kind}")
    try:
        return cls.from_parts(env.arrays, env.meta)
    except MessageError as e:
        raise ProtocolError(e.reason, e.detail) from None
