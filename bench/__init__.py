"""Benchmarks: fixed workloads and the scripts `make bench` runs."""
