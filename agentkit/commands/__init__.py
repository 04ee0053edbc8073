"""Sub-commands of the ``agentkit`` CLI, one module per command group (registered in :mod:`agentkit.cli`)."""
