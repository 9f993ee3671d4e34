"""Protocol builders: one ResponseBuilder per client-facing API."""
