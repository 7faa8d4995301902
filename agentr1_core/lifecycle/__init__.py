"""Run lifecycle: atomic checkpoints, metrics logging, plots, export to a plain Hugging Face folder."""
