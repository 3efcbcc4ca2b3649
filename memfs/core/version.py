"""memfs's version: the package's (pyproject.toml reads it here), the user-agent's and the
MCP server's."""

VERSION = "0.1.0"
