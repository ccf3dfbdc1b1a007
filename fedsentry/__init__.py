"""FedSentry application layer: command line, settings and data files (numpy only)."""

__version__ = "0.1.0"
