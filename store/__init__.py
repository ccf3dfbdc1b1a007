"""The database both the coordinator and the API work on: the tables and the engine (`db`), the Alembic
migrations, the coordinator's resumable row tables (`row_tables`), alert rows and their bulk storage
(`alerts`), the analyst's queries (`triage`) and the job queries (`jobs`). SQLAlchemy only: no MQTT, no web."""
