"""The ``sluice`` command, the top layer: it starts workers (``standalone``, ``distributed``) with their
REST server, drives a running worker over the Connect REST API (``connectors``, ``apply``, ``backfill``)
and runs the local development stack (``dev``, ``quickstart``) of :mod:`sluice.deploy`.

Nothing else in the package imports it; :mod:`sluice.cli.main` holds the command group.
"""
