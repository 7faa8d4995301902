"""Trainer backends (local: one process, CPU or one GPU)."""
