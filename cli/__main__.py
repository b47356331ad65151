"""``python -m sluice.cli``: the ``sluice`` command, for a checkout without the console script."""

from sluice.cli.main import main

main()
