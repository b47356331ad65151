"""Built-in sink connectors, one subpackage each; the worker finds them through entry points."""
