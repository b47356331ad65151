"""Throughput benchmarks: each prints its figures and the ratio against a raw limit measured in the same run."""
