"""The routing policies' names, for the gateway's options without the router's imports (the
registry's message schemas, pydantic: a tenth of a second `astrai serve` paid before starting
anything); gateway.router's POLICIES has one class for each."""

from __future__ import annotations

ROUTING_POLICIES = ("cache_aware", "exact", "least_loaded", "round_robin")
