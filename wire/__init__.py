"""The wire contract between agents and coordinator: topics, the binary envelope, MQTT client set-up.

Both sides import it; it imports neither (numpy and paho-mqtt only)."""
