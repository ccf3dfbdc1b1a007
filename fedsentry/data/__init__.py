"""Data files: named datasets, CSV loaders, ratings."""
