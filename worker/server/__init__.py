"""The worker process: the ZeroMQ link to the gateway, wire conversions, health probes."""
