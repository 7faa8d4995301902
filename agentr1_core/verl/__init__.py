"""The ``verl`` backend (``trainer.name: verl``): rollouts on Ray workers, updates on verl's FSDP workers.

``trainer`` holds the backend and its training loop, ``data`` the mapping of step rows and settings to verl,
``workers`` verl's worker groups, ``compat`` and ``cpu_platform`` what verl needs to run here. Only ``trainer`` is
imported by the core (lazily, through the plugin spec); the others import verl and run in verl's environment.
"""
