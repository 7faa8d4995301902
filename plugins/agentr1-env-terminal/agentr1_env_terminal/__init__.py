"""agentr1-env-terminal: shell and code tasks in a sandbox, read from Harbor task folders."""
