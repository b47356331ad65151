"""Sluice connectors: the SPI (:mod:`connectors.api`) and the built-in sources and sinks."""
