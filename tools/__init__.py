"""Built-in tools for agentkit agents (code search, weather, sandboxed Python). May import :mod:`sandbox`."""
