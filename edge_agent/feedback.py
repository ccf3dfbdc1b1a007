"""Analysts' false-positive feedback, applied on the device (issue 24, point 3).

The coordinator keeps every action in force and sends the device the whole list (wire.feedback.Feedback, retained
on its own topic). The device applies it to the model it scores with: from its threshold before feedback (the
model's, made its own: `Scorer.base_threshold`), action by action in the order analysts took them, the threshold
rises to the highest score the action marked, so that none of those records is flagged again, and never above the
cap (models.detection.threshold.feedback_cap: the fleet's threshold at 1/16 of the promised false-positive rate, or
twice the federation's threshold for a model without the fleet's tail). The list is applied again whenever the
device loads a model (a restart, a promotion) and whenever it changes (an action undone: the threshold comes back
down). A marked score came from one model; under another, the device scores the record again from its features if it
still keeps them (`Kept`: its KEEP_RECORDS most recently flagged records), else the record is `stale` and moves
nothing.

With the device's consent (`fedsentry agent --feedback-training`, off by default) the kept records an action marked
join its training buffer as normal records, once each (a record already trained on stays there when the action is
undone); without it nothing is used, and the report says so (`training: false`).

The effect, per action (threshold before and after, the cap, whether it held the threshold back, records applied,
stale, trained), is reported in the device's status message and shown by the API."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any

import numpy as np

from edge_agent.detector_participant import TrainingBuffer
from edge_agent.scorer import Scorer
from edge_agent.sources import FLOW_FIELDS, Batch, SchemaError, take_rows
from edge_agent.store import AgentStore
from models.core.messages import MessageError
from models.detection.threshold import feedback_cap, feedback_threshold
from wire.feedback import Feedback, model_key
from wire.messages import read
from wire.protocol import Envelope, ProtocolError, decode

log = logging.getLogger("fedsentry.agent")

#: flagged records whose features a device keeps (the oldest forgotten first): what a new model scores again, and
#: what feedback may add to the training buffer. About 0.3 KiB each with 33 features.
KEEP_RECORDS = 512


class Kept:
    """The device's most recently flagged records, by the model and score they were flagged with."""

    def __init__(self, store: AgentStore, most: int = KEEP_RECORDS):
        self.store, self.most = store, most
        self.rows: OrderedDict[tuple[str, float], Batch] = OrderedDict()
        self.dirty = False
        for model, score, columns, x, text in store.load_json("flagged-kept", []):
            self.rows[(model, float(score))] = Batch(columns, np.asarray([x], dtype=float),
                                                     text={f: np.asarray([v], dtype=object) for f, v in text.items()}
                                                     or None)

    def add(self, model: str, scores: np.ndarray, batch: Batch) -> None:
        """The records of `batch` (flagged under `model`, with these scores)."""
        text = {f: v for f, v in (batch.text or {}).items() if f not in FLOW_FIELDS}  # features only
        for i in range(max(0, len(scores) - self.most), len(scores)):  # a copy each: no view keeps a batch alive
            key = (model, float(scores[i]))
            self.rows[key] = take_rows(Batch(batch.columns, batch.X, None, text or None), np.array([i]))
            self.rows.move_to_end(key)
        while len(self.rows) > self.most:
            self.rows.popitem(last=False)
        self.dirty = True

    def get(self, model: str, score: float) -> Batch | None:
        return self.rows.get((model, float(score)))

    def save(self) -> None:
        if self.dirty:
            out = [[m, s, b.columns, [None if np.isnan(v) else float(v) for v in b.X[0]],
                    {f: v[0] for f, v in (b.text or {}).items()}] for (m, s), b in self.rows.items()]
            self.store.save_json("flagged-kept", out)
            self.dirty = False


class DeviceFeedback:
    """The feedback in force on this device (saved, so that a restart applies it before the broker delivers it),
    the flagged records it keeps (their features: not the flow's identifiers), and what it trained on."""

    def __init__(self, store: AgentStore, consent: bool):
        self.store, self.consent = store, consent
        self.kept = Kept(store)
        self.trained: set[str] = set(store.load_json("feedback-trained", []))
        self.report: dict[str, Any] | None = None
        saved = store.load_bytes("feedback.bin")
        self.message: Feedback | None = None
        if saved:
            try:
                self.message = read(Feedback, decode(saved)).check()
            except (ProtocolError, MessageError) as e:
                log.warning("saved feedback unusable: %s", e)

    def accept(self, env: Envelope) -> Feedback:
        """The coordinator's new list; ProtocolError (with its reason) for one that is not a valid one, and the
        device keeps what it had."""
        msg = read(Feedback, env)
        try:
            msg.check()
        except MessageError as e:
            raise ProtocolError(e.reason, e.detail) from None
        self.message = msg
        self.store.save_bytes("feedback.bin", env.encode())
        return msg

    def apply(self, scorer: Scorer, buffer: TrainingBuffer) -> dict[str, Any] | None:
        """Set the scoring model's threshold from its threshold before feedback and every action in force (see the
        module); with consent, add the kept marked records to `buffer`. Returns the report (None: no model)."""
        det, msg = scorer.detector, self.message
        if det is None or msg is None:
            return None
        base = scorer.base_threshold
        cap = feedback_cap(scorer.federation_threshold, getattr(det, "tail_", None), base)
        current = model_key(scorer.model_job, scorer.model_version)
        threshold, actions, learn = base, {}, []
        for k, aid in enumerate(msg.actions):
            scores, stale, keys = [], 0, []
            for i in np.flatnonzero(msg.action == k):
                model, score = msg.models[int(msg.model[i])], float(msg.scores[i])
                record = self.kept.get(model, score)
                if model == current:
                    scores.append(score)
                elif record is not None:
                    try:
                        scores.append(float(scorer.scores_of([record])[0]))
                    except SchemaError:
                        stale += 1
                else:
                    stale += 1
                if record is not None and self.consent:
                    key = json.dumps([model, score])
                    keys.append(key)
                    if key not in self.trained:
                        learn.append(record)
                        self.trained.add(key)
            after, capped = feedback_threshold(threshold, np.asarray(scores), cap)
            actions[aid] = {"before": threshold, "after": after, "cap": cap, "capped": capped, "records": len(scores),
                            "stale": stale, "trained": len(keys)}
            threshold = after
        det.threshold_ = threshold
        if learn:
            for record in learn:
                try:
                    buffer.add(Batch(record.columns, record.X, None, record.text))
                except SchemaError as e:  # the training records have other columns
                    log.warning("a marked record cannot join the training buffer: %s", e)
            buffer.save()
            self.store.save_json("feedback-trained", sorted(self.trained))
        self.kept.save()
        self.report = {"model": current, "base": base, "threshold": threshold, "cap": cap,
                       "training": self.consent, "actions": actions}
        return self.report
