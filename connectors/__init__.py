"""Sluice connectors: the SPI (:mod:`sluice.connectors.api`) and the built-in sources and sinks."""
