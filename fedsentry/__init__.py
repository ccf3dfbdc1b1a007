"""FedSentry application layer: the command line (cli/), the demo (demo/), benchmarks (bench/) and data
files (data/). The version is the installed distribution's (`importlib.metadata`), set once in pyproject.toml."""
