"""WebShop for agentr1: the shopping task in text mode, on WebShop's processed catalogue, with its own reward."""

__version__ = "0.1.0"
