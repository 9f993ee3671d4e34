"""Claude Code's billing line, dropped from the system prompt before the model sees it."""

from __future__ import annotations

import re

# Claude Code (2.1.36 and later) opens every request's system prompt with a text block
# `x-anthropic-billing-header: cc_version=…; cc_entrypoint=…; cch=…;` whose hashes change
# from request to request. It means nothing to the model, and at the very start of the prompt
# it would make every request's ~12k-token system prompt and tools miss the prefix cache.
_BILLING_LINE = re.compile(r"\Ax-anthropic-billing-header:[^\n]*\n*")


def without_billing_header(system: str | None) -> str | None:
    """`system` without a leading billing line; None when nothing else is left."""
    if system is None:
        return None
    rest = _BILLING_LINE.sub("", system, count=1)
    if not rest and rest != system:  # the billing line was all of it
        return None
    return rest
