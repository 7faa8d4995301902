"""The example calculator server, started with a log: ``python logged_calculator.py LOG`` appends ``pid ppid`` to
LOG, then serves over stdio (which process started each server of a run)."""

import os
import sys

if __name__ == "__main__":
    with open(sys.argv[1], "a") as log:
        log.write(f"{os.getpid()} {os.getppid()}\n")
    from agentr1_tools_mcp.examples.calculator_server import server

    server.run()
