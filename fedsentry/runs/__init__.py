"""In-process runs from command-line settings, shared by the simulate, bench and demo commands."""
