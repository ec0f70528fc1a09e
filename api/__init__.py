"""The HTTP API: FastAPI routes over `store`, problem+json errors, and the `netsynth` command line."""
