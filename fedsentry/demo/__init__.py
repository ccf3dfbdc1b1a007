"""The demo: an embedded broker, the coordinator, the API and agent processes, end to end."""
