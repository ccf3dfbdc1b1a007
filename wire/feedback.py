"""False-positive feedback on the wire (issue 24, point 3): what the coordinator tells a device, and what the device
reports back.

`Feedback` is retained on the device's own topic (`feedback_topic`; only that device may read it): every analyst
action on the device's alerts still in force, each with the scores of the records it marked and the model each
score came from. A device applies the whole list to the threshold of the model it scores with (edge_agent.feedback),
so a restart, an undone action and a new model need nothing else. `check` refuses a message that is not one, with a
reason; the device keeps what it had.

The device's report of the effect (`read_report`) travels in its retained status message, under "feedback"."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from models.core.messages import Message, MessageError, array
from wire.protocol import ID_RE, agent_topic

#: scores one device's feedback carries at most (the coordinator refuses an action that would pass it)
MAX_SCORES = 4096
#: analyst actions in force on one device at most (the device reports each one's effect in its status message, whose
#: header must stay within wire.protocol.MAX_HEADER: about 200 bytes an action)
MAX_ACTIONS = 128
ACTION_RE = re.compile(r"^[0-9a-f]{32}$")


def feedback_topic(agent: str) -> str:
    """Retained, written by the coordinator, read by that device alone (its ACL)."""
    return agent_topic(agent, "feedback")


def model_key(job: str, version: int) -> str:
    """How feedback names the model a score came from."""
    return f"{job}:{int(version)}"


@dataclass(kw_only=True)
class Feedback(Message):
    """Every false-positive action in force on one device: `actions` their ids (oldest first); per marked record,
    `scores` its score, `action` the index of its action and `model` the index of its model in `models`
    ("job:version")."""

    kind: ClassVar[str] = "feedback"
    actions: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    scores: np.ndarray = array(1, "f")
    action: np.ndarray = array(1, "iu")
    model: np.ndarray = array(1, "iu")

    def check(self) -> Feedback:
        """Self, or MessageError saying what is wrong (the device refuses the message and keeps what it had)."""
        n = len(self.scores)
        if n > MAX_SCORES or len(self.actions) > MAX_ACTIONS:
            raise MessageError("size", f"{n} scores of {len(self.actions)} actions: at most {MAX_SCORES} of "
                                       f"{MAX_ACTIONS}")
        if len(self.action) != n or len(self.model) != n:
            raise MessageError("shape", f"{n} scores but {len(self.action)} action and {len(self.model)} model "
                                        "indexes")
        if not all(isinstance(a, str) and ACTION_RE.match(a) for a in self.actions) or len(set(self.actions)) != len(
                self.actions):
            raise MessageError("malformed", "actions must be distinct 32-digit hex ids")
        for m in self.models:
            job, _, version = str(m).rpartition(":")
            if not (ID_RE.match(job) and version.isdigit() and len(version) <= 10):
                raise MessageError("malformed", f"model {m!r} is not 'job:version'"[:200])
        if n and not (np.all(self.scores > 0) and np.all(self.scores < 1e300)):
            raise MessageError("range", "scores must be positive finite numbers")
        for name, idx, size in (("action", self.action, len(self.actions)), ("model", self.model, len(self.models))):
            if n and not (idx.min() >= 0 and idx.max() < size):
                raise MessageError("range", f"{name} indexes must point into the message's {name}s")
        return self


#: what a device reports per action (numbers) and about the whole (its threshold before feedback, in force, the cap)
EFFECT_NUMBERS = ("before", "after", "cap")
EFFECT_COUNTS = ("records", "stale", "trained")


def read_report(meta: Any) -> dict[str, Any] | None:
    """A device's report of the feedback it applied (its status message's "feedback"), checked; None when it is
    not one (a status is never refused for it)."""
    if not isinstance(meta, dict):
        return None
    actions, model = meta.get("actions"), meta.get("model")
    if not (isinstance(actions, dict) and len(actions) <= MAX_ACTIONS and isinstance(model, str) and len(model) < 80
            and isinstance(meta.get("training"), bool)):
        return None
    out: dict[str, dict[str, Any]] = {}
    for aid, e in actions.items():
        if not (isinstance(aid, str) and ACTION_RE.match(aid) and isinstance(e, dict)):
            return None
        numbers = [e.get(k) for k in EFFECT_NUMBERS]
        counts = [e.get(k) for k in EFFECT_COUNTS]
        if not (all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in numbers)
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SCORES for v in counts)
                and isinstance(e.get("capped"), bool)):
            return None
        out[aid] = {**{k: float(e[k]) for k in EFFECT_NUMBERS}, **dict(zip(EFFECT_COUNTS, counts)),
                    "capped": e["capped"]}
    return {"model": model, "training": meta["training"], "actions": out}
