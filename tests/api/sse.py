"""Reading a live server-sent event stream in tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The events of an SSE response as they arrive: dicts of `id`, `event` and parsed `data`."""
    fields: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if not line:
            if fields:
                yield fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = json.loads(value) if name == "data" else value
