"""netsynth's Python client: drive a netsynth service over its HTTP API (no server code, no JAX).

    from netsynth import Client
    with Client("http://127.0.0.1:8000", api_key) as client:
        dataset = client.upload_dataset("digits.zip")
        job = client.create_job(dataset["id"], budget=300)
        for event in client.watch(job["id"]): ...
"""

from netsynth.aio import AsyncClient
from netsynth.client import Client
from netsynth.errors import ApiError, ConnectionFailed, NetsynthError

__all__ = ["ApiError", "AsyncClient", "Client", "ConnectionFailed", "NetsynthError"]
