"""The MCP gateway: Guardian between an MCP client and its upstream MCP servers (issue 27)."""
