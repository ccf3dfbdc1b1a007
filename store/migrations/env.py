"""Alembic environment: runs on the connection handed over by store.db.migrate (or on the URL in
$FEDSENTRY_DB_URL when run from the alembic command line)."""

from alembic import context
from sqlalchemy import engine_from_config, pool

from store.db import Base, db_url

target_metadata = Base.metadata
config = context.config
connection = config.attributes.get("connection")

if connection is None:
    engine = engine_from_config({"sqlalchemy.url": db_url()}, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
