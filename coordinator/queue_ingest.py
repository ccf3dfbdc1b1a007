"""Ingest workers on a clustered broker (issue 27, point 2): agents' alerts and statuses read from quorum queues bound
to RabbitMQ's `amq.topic` (where its MQTT plugin routes what devices publish), stored and acknowledged only after
the commit. Any number of workers share the alert queue, each on any node: a worker killed, or the node that leads
the queue lost, loses nothing, because the broker delivers what was not acknowledged again and an alert id already
stored is a redelivery. A device is told which alerts are stored through the same exchange (its MQTT `ack` topic).

Statuses wait in their own queue, which one worker at a time reads (RabbitMQ's single active consumer; another
takes over when it dies): a device's statuses are stored in the order it sent them, whatever the number of workers.
The worker keeps each device's newest status only, acknowledging the ones it supersedes, and handles them between
alerts as the MQTT coordinator does (coordinator.presence, coordinator.status: the same code)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from coordinator.ingest import AlertIngest
from coordinator.ingest_limit import IngestLimit
from coordinator.presence import PRESENCE_BATCH, PRESENCE_EVERY, Presence, status_sender
from coordinator.status import StatusStore
from coordinator.upload_queue import UploadIngest
from wire.protocol import PREFIX, ProtocolError, agent_message

log = logging.getLogger("fedsentry.coordinator")

#: the queue every ingest worker reads (quorum: replicated, its leader's node may die)
QUEUE = "fedsentry.alerts"
#: what RabbitMQ's MQTT plugin makes of the agents' alert topics (`/` and `.` swap places)
ROUTING_KEY = PREFIX.replace("/", ".") + ".agents.*.alerts"
#: the queue of the agents' statuses, read by one worker at a time, and its routing key
STATUS_QUEUE = "fedsentry.status"
STATUS_KEY = PREFIX.replace("/", ".") + ".agents.*.status"
#: the queue of the agents' answers to rounds (stored for the jobs' drivers: coordinator.upload_queue)
UPLOAD_QUEUE = "fedsentry.uploads"
UPLOAD_KEY = PREFIX.replace("/", ".") + ".agents.*.upload"
#: answers a worker holds unacknowledged at most (one can be megabytes: a recommendation job's item factors)
UPLOAD_PREFETCH = 64
#: statuses the queue keeps at most (the oldest dropped beyond): a flood cannot grow the broker without bound, and a
#: device's newest status is the one that counts
STATUS_BACKLOG = 100_000
#: statuses a worker holds unacknowledged at most (superseded ones are acknowledged as they come)
STATUS_PREFETCH = 1000


def mqtt_topic(routing_key: str) -> str:
    """The MQTT topic an AMQP routing key of the plugin stands for (and the other way round)."""
    return routing_key.translate(str.maketrans("./", "/."))


def check_queue_url(url: str) -> None:
    """ValueError naming the flag when `url` is not an AMQP URL (its password never in the message)."""
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise ValueError(f"--queue: {parts.scheme or 'no scheme'}://{parts.hostname or ''}... is not an AMQP "
                         "URL (amqp://user:password@host:5672/)")


class QueueIngest:
    """One ingest worker's consumer: `run` until `stop`, moving to the next node's URL when a connection is lost."""

    def __init__(self, urls: list[str], sessions: sessionmaker[Session], reject: Callable[..., None],
                 limit: IngestLimit, batch: int, wait: float, prefetch: int = 2000):
        if not urls:
            raise ValueError("an ingest worker needs the queue's broker URL (amqp://...)")
        for url in urls:
            check_queue_url(url)
        self.urls, self.sessions, self.reject, self.limit = list(urls), sessions, reject, limit
        self.batch, self.wait, self.prefetch = batch, wait, prefetch
        self.stored = 0  # alerts stored by this worker (redeliveries not counted)
        #: the devices' newest statuses, and where they are written (the MQTT coordinator's code)
        #: where statuses are written (the MQTT coordinator's code); what waits is each connection's (`Presence`)
        self.statuses = StatusStore(sessions)
        self.consuming = threading.Event()

    def run(self, stop: threading.Event) -> None:
        import pika.exceptions

        k = 0
        while not stop.is_set():
            url = self.urls[k % len(self.urls)]
            k += 1
            try:
                self._consume(url, stop)
            except (pika.exceptions.AMQPError, OSError) as e:
                # what waited for a flush was not acknowledged: the broker delivers it again, to us or another
                log.warning("alert queue at node %d lost (%s: %s); trying the next", (k - 1) % len(self.urls),
                            type(e).__name__, str(e)[:200])
                self.consuming.clear()
                stop.wait(0.5)
            except OperationalError as e:  # the database is down: nothing unstored was acknowledged; read again
                log.error("database error (%s); reading the queue again in 1 s", str(e.orig).strip()[:200])
                self.consuming.clear()
                k -= 1  # the same node
                stop.wait(1.0)

    def _consume(self, url: str, stop: threading.Event) -> None:
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            ch = conn.channel()
            ch.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
            ch.queue_bind(QUEUE, "amq.topic", ROUTING_KEY)
            ch.queue_declare(STATUS_QUEUE, durable=True, arguments={
                "x-queue-type": "quorum", "x-single-active-consumer": True, "x-max-length": STATUS_BACKLOG})
            ch.queue_bind(STATUS_QUEUE, "amq.topic", STATUS_KEY)
            ch.queue_declare(UPLOAD_QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
            ch.queue_bind(UPLOAD_QUEUE, "amq.topic", UPLOAD_KEY)
            persistent = pika.BasicProperties(delivery_mode=2)

            def confirm(topic: str, payload: bytes) -> None:
                ch.basic_publish("amq.topic", mqtt_topic(topic), payload, persistent)

            def ack(tag: int, _qos: int = 1) -> None:
                ch.basic_ack(tag)

            ingest = AlertIngest(self.sessions, confirm, ack, self.reject, self.limit)
            uploads = UploadIngest(self.sessions, self.reject, ack, confirm)
            presence = Presence(ack)  # the devices' newest statuses, unacknowledged on this connection
            arrived = [0]

            def on_alert(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
                arrived[0] += 1
                if self.handle(ingest, uploads, method.routing_key, body, method.delivery_tag) != "buffered":
                    ch.basic_ack(method.delivery_tag)

            def on_status(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
                topic = mqtt_topic(method.routing_key)
                presence.put(status_sender(topic) or topic, (topic, body, method.delivery_tag, 1))

            ch.basic_qos(prefetch_count=self.prefetch)  # per consumer: each queue its own window
            ch.basic_consume(QUEUE, on_alert)
            ch.basic_qos(prefetch_count=UPLOAD_PREFETCH)
            ch.basic_consume(UPLOAD_QUEUE, on_alert)
            ch.basic_qos(prefetch_count=STATUS_PREFETCH)
            ch.basic_consume(STATUS_QUEUE, on_status)
            self.consuming.set()
            since_statuses = 0
            while not stop.is_set():
                before = arrived[0]
                conn.process_data_events(time_limit=0 if presence.waiting() else self.wait)
                came = arrived[0] - before
                since_statuses += came
                # statuses after alerts: when none came, and a few every PRESENCE_EVERY alert messages
                if presence.waiting() and (came == 0 or since_statuses >= PRESENCE_EVERY):
                    since_statuses = 0
                    for topic, body, tag, _ in presence.take(PRESENCE_BATCH):
                        self.handle(ingest, uploads, mqtt_topic(topic), body, tag)  # its routing key
                        ch.basic_ack(tag)
                if ingest.due(came == 0, self.batch, self.wait):
                    self._flush(ingest)
                if uploads.due(came == 0, UPLOAD_PREFETCH, self.wait):
                    uploads.flush()
            if ingest.acks:
                self._flush(ingest)
            uploads.flush()
        finally:  # what waits unacknowledged goes with the connection: the broker delivers it again
            with suppress(Exception):
                conn.close()

    def _flush(self, ingest: AlertIngest) -> None:
        before = ingest.stored
        ingest.flush()
        self.stored += ingest.stored - before

    def handle(self, ingest: AlertIngest, uploads: UploadIngest, routing_key: str, body: bytes, tag: int) -> str:
        """One message from a queue: "buffered" (an alert or an answer, acknowledged with its batch) or "done" (a
        status stored, or a message refused and counted)."""
        topic = mqtt_topic(routing_key)
        try:
            agent, what, env = agent_message(topic, body)
            if what == "alerts" and env.kind in ("alert", "alerts"):
                return ingest.buffer(agent, env, topic, tag, 1)[0]
            if what == "status" and env.kind == "status":
                self.statuses.take(agent, env)
                return "done"
            if what == "upload":
                uploads.buffer(agent, env, topic, body, tag)
                return "buffered"
            raise ProtocolError("kind", f"{env.kind} on {topic}")
        except ProtocolError as e:
            self.reject(e.reason, e.detail, topic)
        except OperationalError:
            raise  # not acknowledged: delivered again once the database is back
        except Exception as e:  # whatever a message does to a handler, it is refused alone and acknowledged
            log.exception("message on %s broke its handler", topic)
            self.reject("error", f"{type(e).__name__}: {e}"[:300], topic)
        return "done"
