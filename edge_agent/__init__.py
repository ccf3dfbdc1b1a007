"""The device side of FedSentry: a light agent (numpy + paho-mqtt) and the wire protocol."""
