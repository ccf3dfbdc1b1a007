"""An ingest worker on the queue (coordinator.queue_ingest) outlives its database going away: the error ends the
connection to the broker (whatever was not stored is not acknowledged, so the broker delivers it again) and the
worker reads the same node again, instead of its thread dying with the worker process still up."""

from __future__ import annotations

import threading

from sqlalchemy.exc import OperationalError

from coordinator.ingest_limit import IngestLimit
from coordinator.queue_ingest import QueueIngest


def test_a_database_error_does_not_end_the_worker():
    worker = QueueIngest(["amqp://u:p@node-a/", "amqp://u:p@node-b/"], None, lambda *a: None,  # type: ignore[arg-type]
                         IngestLimit(1.0, 1.0), batch=10, wait=0.01)
    stop, read = threading.Event(), []

    def consume(url: str, _stop: threading.Event) -> None:
        read.append(url)
        if len(read) == 1:
            raise OperationalError("INSERT INTO alerts ...", {}, Exception("the database system is shutting down"))
        stop.set()

    worker._consume = consume  # type: ignore[method-assign]
    t = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and read == ["amqp://u:p@node-a/", "amqp://u:p@node-a/"]
