"""The coordinator: devices, jobs and rounds over MQTT, with every bit of state in the database."""
