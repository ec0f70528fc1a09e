"""Bodies of `/session`: signing a browser in with an API key, and the session it gets."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import StorableText, UserOut


class SessionIn(BaseModel):
    """The API key a browser signs in with."""

    model_config = ConfigDict(extra="forbid")

    api_key: StorableText = Field(min_length=1, max_length=200, description="An API key of the user signing in.")


class SessionOut(BaseModel):
    """A browser's session: who is signed in, the CSRF token its changes must carry, and when it ends."""

    user: UserOut
    csrf_token: str = Field(description="Send it in the `X-CSRF-Token` header of every POST, PUT, PATCH and DELETE "
                                        "signed in with the session cookie.")
    expires_at: datetime = Field(description="When the session ends (sooner if its API key is revoked).")
