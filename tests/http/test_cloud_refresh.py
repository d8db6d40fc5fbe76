"""``Refreshing``: a cloud credential fetched in a thread, once for many requests, refreshed
ahead of its expiry while requests go on with the current one, and its failures told clearly
(proxy/http/cloud/refresh.py). The fetches here are plain functions run in real threads."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from proxy.core.errors import UpstreamCredentialsError
from proxy.http.cloud.refresh import REST, Refreshing


class Issuer:
    """Issues numbered values that live ``lifetime`` seconds; counts its calls."""

    def __init__(self, lifetime: float | None, delay: float = 0.0) -> None:
        self.lifetime = lifetime
        self.delay = delay
        self.calls = 0
        self.threads: set[int] = set()
        self.fail: Exception | None = None
        self.gate: threading.Event | None = None  # a fetch waits for it, when set

    def __call__(self) -> tuple[str, float | None]:
        self.calls += 1
        self.threads.add(threading.get_ident())
        if self.delay:
            time.sleep(self.delay)
        if self.gate is not None:
            self.gate.wait(5)
        if self.fail is not None:
            raise self.fail
        expires = None if self.lifetime is None else time.time() + self.lifetime
        return f"token-{self.calls}", expires


async def test_one_fetch_serves_many_requests_off_the_loop() -> None:
    issuer = Issuer(lifetime=3600)
    credential = Refreshing(issuer, "test credentials", timeout=5)
    values = await asyncio.gather(*(credential.get() for _ in range(20)))
    values += [await credential.get() for _ in range(20)]
    assert set(values) == {"token-1"} and issuer.calls == 1
    assert threading.get_ident() not in issuer.threads


async def test_a_value_that_never_expires_is_fetched_once() -> None:
    issuer = Issuer(lifetime=None)
    credential = Refreshing(issuer, "test credentials", timeout=5)
    assert [await credential.get() for _ in range(5)] == ["token-1"] * 5


async def test_refreshed_ahead_of_expiry_while_requests_go_on_with_the_current() -> None:
    """Lifetime 1 s: refreshed from 0.75 s (a quarter ahead), used until 0.9 s (a tenth). The
    refresh is held until the requests have had their answer: none waited for it."""
    issuer = Issuer(lifetime=1.0)
    credential = Refreshing(issuer, "test credentials", timeout=5)
    assert await credential.get() == "token-1"
    gate = threading.Event()
    issuer.gate = gate
    await asyncio.sleep(0.78)
    assert [await credential.get() for _ in range(3)] == ["token-1"] * 3
    gate.set()
    await asyncio.sleep(0.15)
    assert await credential.get() == "token-2"
    assert issuer.calls == 2


async def test_past_its_usable_time_a_request_waits_for_the_next() -> None:
    issuer = Issuer(lifetime=0.2)
    credential = Refreshing(issuer, "test credentials", timeout=5)
    assert await credential.get() == "token-1"
    await asyncio.sleep(0.25)
    assert await credential.get() == "token-2"


async def test_a_failure_names_the_credentials_and_rests_before_the_next_try(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client is told which credentials failed; the operator's log says why, in the
    library's first words only (google-auth's RefreshError carries the token endpoint's whole
    answer after them)."""
    caplog.set_level(logging.WARNING, logger="proxy.cloud")
    issuer = Issuer(lifetime=3600)
    issuer.fail = LookupError("no AWS credentials found", {"id_token": "eyJ-secret"})
    credential = Refreshing(issuer, "AWS credentials of provider 'bedrock'", timeout=5)
    with pytest.raises(UpstreamCredentialsError) as info:
        await credential.get()
    assert info.value.message == (
        "The AWS credentials of provider 'bedrock' could not be fetched (LookupError); "
        "the proxy's log says why"
    )
    assert info.value.http_status == 502
    assert "could not be fetched: LookupError: no AWS credentials found" in caplog.text
    assert "eyJ-secret" not in caplog.text
    with pytest.raises(UpstreamCredentialsError):
        await credential.get()
    assert issuer.calls == 1  # told again without asking again
    issuer.fail = None
    await asyncio.sleep(REST)
    assert await credential.get() == "token-2"


async def test_a_failing_refresh_is_tried_again_at_most_once_a_rest() -> None:
    """In the refresh window, with the current value still good, a failed refresh is not
    started again by every request."""
    issuer = Issuer(lifetime=2.0)
    credential = Refreshing(issuer, "test credentials", timeout=5)
    assert await credential.get() == "token-1"
    issuer.fail = OSError("the token endpoint is down")
    await asyncio.sleep(1.55)  # past the refresh time (1.5 s), before the end of use (1.8 s)
    for _ in range(10):
        assert await credential.get() == "token-1"
        await asyncio.sleep(0.005)
    assert issuer.calls == 2  # the first refresh; the others wait out their rest


async def test_a_fetch_slower_than_the_timeout_is_a_clear_error() -> None:
    issuer = Issuer(lifetime=3600, delay=0.5)
    credential = Refreshing(issuer, "Google credentials of provider 'vertex'", timeout=0.1)
    with pytest.raises(UpstreamCredentialsError, match=r"within 0\.1 s"):
        await credential.get()
    await asyncio.sleep(0.5)  # the fetch went on, for the next request
    assert await credential.get() == "token-1"
    assert issuer.calls == 1


async def test_a_value_that_comes_expired_is_refused() -> None:
    issuer = Issuer(lifetime=-1.0)
    credential = Refreshing(issuer, "Google credentials of provider 'vertex'", timeout=5)
    with pytest.raises(UpstreamCredentialsError, match="came expired"):
        await credential.get()
