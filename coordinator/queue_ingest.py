"""Ingest workers on a clustered broker (issue 27, point 2): agents' alerts read from a quorum queue bound to
RabbitMQ's `amq.topic` (where its MQTT plugin routes what devices publish), stored by `AlertIngest` and acknowledged
only after the commit. Any number of workers share the queue, each on any node: a worker killed, or the node that
leads the queue lost, loses nothing, because the broker delivers what was not acknowledged again and an alert id
already stored is a redelivery. A device is told which alerts are stored through the same exchange (its MQTT `ack`
topic)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from urllib.parse import urlsplit

from sqlalchemy.orm import Session, sessionmaker

from coordinator.ingest import AlertIngest
from coordinator.ingest_limit import IngestLimit
from wire.protocol import PREFIX, ProtocolError, agent_message

log = logging.getLogger("fedsentry.coordinator")

#: the queue every ingest worker reads (quorum: replicated, its leader's node may die)
QUEUE = "fedsentry.alerts"
#: what RabbitMQ's MQTT plugin makes of the agents' alert topics (`/` and `.` swap places)
ROUTING_KEY = PREFIX.replace("/", ".") + ".agents.*.alerts"


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

    def _consume(self, url: str, stop: threading.Event) -> None:
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            ch = conn.channel()
            ch.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
            ch.queue_bind(QUEUE, "amq.topic", ROUTING_KEY)
            ch.basic_qos(prefetch_count=self.prefetch)
            persistent = pika.BasicProperties(delivery_mode=2)

            def confirm(topic: str, payload: bytes) -> None:
                ch.basic_publish("amq.topic", mqtt_topic(topic), payload, persistent)

            ingest = AlertIngest(self.sessions, confirm, lambda tag, qos: ch.basic_ack(tag), self.reject,
                                 self.limit)
            self.consuming.set()
            for method, _props, body in ch.consume(QUEUE, inactivity_timeout=self.wait):
                if method is not None and self.handle(ingest, method.routing_key, body, method.delivery_tag) \
                        != "buffered":
                    ch.basic_ack(method.delivery_tag)
                if ingest.due(method is None, self.batch, self.wait):
                    self._flush(ingest)
                if stop.is_set():
                    break
            if ingest.acks:
                self._flush(ingest)
        finally:
            with suppress(Exception):
                conn.close()

    def _flush(self, ingest: AlertIngest) -> None:
        before = ingest.stored
        ingest.flush()
        self.stored += ingest.stored - before

    def handle(self, ingest: AlertIngest, routing_key: str, body: bytes, tag: int) -> str:
        """One message from the queue: "buffered" (acknowledged with its batch) or "done" (refused, counted)."""
        topic = mqtt_topic(routing_key)
        try:
            agent, what, env = agent_message(topic, body)
            if what != "alerts" or env.kind not in ("alert", "alerts"):
                raise ProtocolError("kind", f"{env.kind} on {topic}")
            return ingest.buffer(agent, env, topic, tag, 1)[0]
        except ProtocolError as e:
            self.reject(e.reason, e.detail, topic)
        except Exception as e:  # whatever a message does to a handler, it is refused alone and acknowledged
            log.exception("message on %s broke its handler", topic)
            self.reject("error", f"{type(e).__name__}: {e}"[:300], topic)
        return "done"
