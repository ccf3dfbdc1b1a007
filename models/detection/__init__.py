"""Anomaly detection shared by the detector families: a detector job's settings (`spec`), preprocessing and
feature encoding, the detector and its explanations, thresholds and the fleet's screening of what devices
claim, metrics, robust trimming of records, and the attack catalogue the robustness bench uses."""
