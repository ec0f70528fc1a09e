"""Behind a TLS proxy: a request that came over https to a proxy the API trusts (NETSYNTH_FORWARDED_ALLOW_IPS) and
that says so in X-Forwarded-Proto signs in with a `Secure` session cookie; the same header from anyone else, or
plain http, does not; NETSYNTH_SECURE_COOKIES makes the cookie Secure whatever the scheme. The server runs as
`netsynth serve` runs it: the app, not uvicorn, decides whom to believe."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.cookies import SimpleCookie
from typing import Any

import httpx
import pytest
import uvicorn

from api.app import create_app
from api.cli import serve
from infra.settings import Settings
from tests.api.conftest import Account
from tests.workers.service import free_port, wait_for

pytestmark = pytest.mark.anyio
PROXY = "10.0.0.2"
HTTPS = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}


def secure(response: httpx.Response) -> bool:
    """Whether the response's session cookie is Secure."""
    assert response.status_code in (200, 204), response.text
    return bool(SimpleCookie(response.headers["set-cookie"])["netsynth_session"]["secure"])


async def _sign_in_and_out(settings: Settings, key: str, client: tuple[str, int],
                           headers: dict[str, str]) -> tuple[httpx.Response, httpx.Response]:
    """Sign in with `key` and out again from `client`'s address, sending `headers`: both answers."""
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://api:8000", headers=headers) as c:
        signed_in = await c.post("/api/v1/session", json={"api_key": key})
        c.cookies.clear()  # a Secure cookie would not go back over http: send it by hand
        token = SimpleCookie(signed_in.headers["set-cookie"])["netsynth_session"].value
        signed_out = await c.delete("/api/v1/session", headers={
            "Cookie": f"netsynth_session={token}", "X-CSRF-Token": signed_in.json()["csrf_token"]})
    app.state.engine.dispose()
    return signed_in, signed_out


@pytest.mark.parametrize(("trusted", "client", "headers", "expected"), [
    (PROXY, PROXY, HTTPS, True),  # https to the trusted proxy
    ("10.0.0.0/24", PROXY, HTTPS, True),  # a trusted network
    (PROXY, PROXY, {}, False),  # plain http through the proxy
    (PROXY, PROXY, {"X-Forwarded-Proto": "http"}, False),
    (PROXY, "10.0.0.3", HTTPS, False),  # anyone else may say what they like
    ("127.0.0.1", PROXY, HTTPS, False),  # the default trusts only the same machine
])
async def test_the_cookie_is_secure_when_a_trusted_proxy_says_https(
        settings: Settings, account: Account, trusted: str, client: str, headers: dict[str, str],
        expected: bool) -> None:
    signed_in, signed_out = await _sign_in_and_out(settings.model_copy(update={"forwarded_allow_ips": trusted}),
                                                   account.key, (client, 40000), headers)
    assert secure(signed_in) is expected
    assert secure(signed_out) is expected  # the cookie that clears it, too


async def test_secure_cookies_makes_the_cookie_secure_over_plain_http(settings: Settings, account: Account) -> None:
    signed_in, signed_out = await _sign_in_and_out(settings.model_copy(update={"secure_cookies": True}),
                                                   account.key, ("198.51.100.4", 40000), {})
    assert secure(signed_in) and secure(signed_out)


@contextmanager
def served_as_the_cli_serves(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """uvicorn on a free port, configured as `netsynth serve` configures it; its URL."""
    port = free_port()
    given: dict[str, Any] = {}
    with monkeypatch.context() as patched:
        patched.setattr(uvicorn, "run", lambda app, **options: given.update(app=app, **options))
        serve(settings, "127.0.0.1", port)
    server = uvicorn.Server(uvicorn.Config(log_level="warning", **given))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "uvicorn to start", interval=0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        given["app"].state.engine.dispose()


@pytest.mark.parametrize(("trusted", "expected"), [("127.0.0.1", True), ("10.1.2.3", False)])
def test_a_live_server_believes_only_the_proxies_the_settings_name(
        settings: Settings, account: Account, monkeypatch: pytest.MonkeyPatch, trusted: str, expected: bool) -> None:
    """The test connects from 127.0.0.1, which uvicorn's own proxy handling would always believe."""
    with served_as_the_cli_serves(settings.model_copy(update={"forwarded_allow_ips": trusted}), monkeypatch) as url:
        over_https = httpx.post(f"{url}/api/v1/session", json={"api_key": account.key}, headers=HTTPS, timeout=30)
        plain = httpx.post(f"{url}/api/v1/session", json={"api_key": account.key}, timeout=30)
    assert secure(over_https) is expected
    assert not secure(plain)
