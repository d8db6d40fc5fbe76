"""A credential fetched off the event loop, kept until shortly before it expires, and refreshed
in the background ahead of that.

The clouds' libraries are blocking (botocore reads files and calls instance metadata or STS,
google-auth posts to a token endpoint with requests): every fetch runs in a thread, one at a
time per credential, and requests keep using the current value while the next is fetched.
google-auth's own ``valid`` counts a token stale minutes before its expiry, so a token shorter
lived than that would be fetched on every request: the schedule here is a share of the lifetime.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from proxy.core.errors import UpstreamCredentialsError

T = TypeVar("T")
log = logging.getLogger("proxy.cloud")

# Refresh this long before expiry, at most, or a quarter of the lifetime if that is shorter.
AHEAD: Final = 300.0
# Stop using a value this long before expiry, at most (the request must reach the cloud in
# time), or a tenth of the lifetime if shorter.
MARGIN: Final = 30.0
# After a failed fetch, the same failure is told for this long before trying again: a broken
# credential must not turn every request into a call to the token endpoint.
REST: Final = 1.0

# value, and when it expires (seconds since the epoch), None for never
Fetch = Callable[[], tuple[T, float | None]]


class Refreshing(Generic[T]):
    """One credential: ``get`` returns it, fetching it in a thread when there is none usable."""

    def __init__(self, fetch: Fetch[T], what: str, timeout: float) -> None:
        self._fetch = fetch
        self._what = what  # "provider 'bedrock' (AWS credentials)", for errors and logs
        self._timeout = timeout
        self._value: T | None = None
        self._refresh_at = 0.0
        self._usable_until = 0.0
        self._flight: asyncio.Future[tuple[T, float | None]] | None = None
        self._failed_at = -REST
        self._failure: UpstreamCredentialsError | None = None

    async def get(self) -> T:
        now = time.time()
        value = self._value
        resting = time.monotonic() - self._failed_at < REST
        if value is not None and now < self._usable_until:
            if now >= self._refresh_at and self._flight is None and not resting:
                self._start()  # behind the requests that go on with this one
            return value
        failure = self._failure
        if failure is not None and self._flight is None and resting:
            raise UpstreamCredentialsError(failure.message)  # one per request: each is its own
        return await self._wait()

    def _start(self) -> asyncio.Future[tuple[T, float | None]]:
        loop = asyncio.get_running_loop()
        started = time.time()
        flight = loop.run_in_executor(None, self._fetch)
        flight.add_done_callback(lambda done: self._landed(done, started))
        self._flight = flight
        return flight

    def _landed(self, done: asyncio.Future[tuple[T, float | None]], started: float) -> None:
        self._flight = None
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            self._failure = credentials_error(self._what, error)
            self._failed_at = time.monotonic()
            log.warning("The %s could not be fetched: %s", self._what, describe(error))
            return
        value, expires = done.result()
        self._value, self._failure = value, None
        if expires is None:
            self._refresh_at = self._usable_until = float("inf")
            return
        lifetime = max(0.0, expires - started)
        self._refresh_at = expires - min(AHEAD, lifetime / 4)
        self._usable_until = expires - min(MARGIN, lifetime / 10)

    async def _wait(self) -> T:
        flight = self._flight or self._start()
        try:
            async with asyncio.timeout(self._timeout):
                # Shielded: a request that gives up does not cancel the fetch the next one needs.
                value, expires = await asyncio.shield(flight)
        except TimeoutError:
            raise UpstreamCredentialsError(
                f"The {self._what} could not be fetched within {self._timeout:g} s"
            ) from None
        except UpstreamCredentialsError:
            raise
        except Exception as exc:
            # Logged with its details by _landed; the client is told which, not why.
            raise credentials_error(self._what, exc) from None
        if expires is not None and time.time() >= expires:
            raise UpstreamCredentialsError(f"The {self._what} came expired")
        return value


async def read_identity(read: Callable[[], object], what: str) -> None:
    """``read`` in a thread, its failure logged (the requests that need it tell it too)."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, read)
    except Exception as exc:
        log.warning("The %s could not be read: %s", what, describe(exc))


def credentials_error(what: str, exc: BaseException) -> UpstreamCredentialsError:
    """The client's error: which credentials, and the kind of failure. The library's words
    (a file's path, an account's name, an IAM ARN) are the operator's, in the log."""
    if isinstance(exc, UpstreamCredentialsError):
        return exc
    return UpstreamCredentialsError(
        f"The {what} could not be fetched ({type(exc).__name__}); the proxy's log says why"
    )


def describe(exc: BaseException) -> str:
    """The library's own words for the log (they name the problem: an expired key, no
    credentials found, invalid_grant), cut short. Only the first argument: google-auth's
    RefreshError carries the token endpoint's whole answer in its second."""
    first = exc.args[0] if exc.args else ""
    text = " ".join(str(first).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
