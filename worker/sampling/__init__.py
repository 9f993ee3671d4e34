"""Choosing the next token: penalties, filters, seeded draws, logprobs and grammar masks."""
