"""FedSentry's pure core: preprocessing, federated algorithms, detector, metrics, simulator.

Nothing in this package performs I/O. Everything an edge agent imports from here needs numpy only.
"""
