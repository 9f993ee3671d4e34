"""Facts about this host that the worker keys on: its CPU, and where derived files are cached."""
