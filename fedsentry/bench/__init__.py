"""Benchmarks: every algorithm on one split, the fleet over a real broker, the API under load."""
