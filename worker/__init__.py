"""The Sluice worker: configuration, herders, task runners and the ``sluice`` command."""
