"""agentr1-tools-mcp: the tools of MCP servers as agentr1 tools (the tool source ``mcp``).

Importing this package imports nothing else: its launcher module runs before every stdio server it starts.
"""
