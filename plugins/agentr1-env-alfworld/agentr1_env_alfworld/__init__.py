"""agentr1 plugin: ALFWorld household text games (TextWorld PDDL backend) as an environment, with a game-process
pool, a dataset loader for ALFWorld game folders and a success reward."""

__version__ = "0.1.0"
