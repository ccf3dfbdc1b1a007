"""The REST API and the dashboard (FastAPI). It reads and writes the coordinator's database and never
talks MQTT: the coordinator picks up what the API writes (new jobs, cancellations, promotions)."""
