"""Sluice, a data integration connector platform in the style of Kafka Connect.

The distribution claims this one import name. Its subpackages live at the top of the repository
(``worker/``, ``connectors/``, ``converters/``, ``offsets/``, ``rest/``, ``plugins/``,
``transforms/``, ``deploy/``, ``cli/``) and are reached here through symbolic links, so that a checkout, an
editable install and the built wheel all import them as ``sluice.worker``, ``sluice.connectors``, …
(the wheel holds real copies). Nothing imports the folders under their bare names.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("sluice")
except _metadata.PackageNotFoundError:  # a checkout on sys.path without an install
    __version__ = "0+unknown"
