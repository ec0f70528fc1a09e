"""The product's own rules and formats, free of JAX, the database and the web framework: what a budget tier, a
tolerance and a dataset are, defined once for `api/`, `synthesis/`, `workers/` and `store/` (docs/architecture.md)."""
