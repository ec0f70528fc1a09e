"""netsynth's Python client: drive a netsynth service over its HTTP API (no server code, no JAX)."""
