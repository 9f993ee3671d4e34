"""The engine: intake, the continuous-batching loop, the forward runner and the in-process API."""
