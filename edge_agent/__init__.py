"""The device side of FedSentry: a light agent (numpy + paho-mqtt) that trains, scores and alerts."""
