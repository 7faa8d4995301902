"""Example MCP servers and the example task of a third-party server (time conversions)."""
