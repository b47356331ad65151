"""Built-in source connectors, one subpackage each; the worker finds them through entry points."""
