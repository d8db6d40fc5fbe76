"""Every OpenAI-compatible fixture through the normalizer alone, checked against its golden file.

Streams are fed whole, byte by byte, as recorded socket reads, and split at random points
(hypothesis), with the client asking for usage and not; every output object is validated
against OpenAI's schema with strict keys.
"""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.errors import ProxyError, to_openai_error
from proxy.emulator.recording import recording_exception, recording_status
from proxy.http.upstream import status_error
from proxy.normalize import RequestContext, StreamNormalizer, normalize_response
from tests.support.replay import (
    CLIENT_MODEL,
    ERROR_STATUS,
    Golden,
    check_stream,
    check_whole,
    goldens,
    parse_frames,
)

CREATED = 1_600_000_000  # the request time the normalizer falls back to
STREAMS = [g for g in goldens() if g.stream]
WHOLES = [g for g in goldens() if not g.stream]
_ids = lambda g: g.name  # noqa: E731


def context(golden: Golden, include_usage: bool) -> RequestContext:
    return RequestContext(
        endpoint="chat" if golden.endpoint == "chat" else "completions",
        model=CLIENT_MODEL,
        created=CREATED,
        include_usage=include_usage,
        dialect=golden.data["dialect"],
        n=golden.n,
    )


def run_stream(
    golden: Golden, reads: list[bytes], include_usage: bool
) -> tuple[bytes, StreamNormalizer]:
    decoder = golden.decoder()
    normalizer = StreamNormalizer(context(golden, include_usage))
    out: list[bytes] = []
    for read in reads:
        for event in decoder.feed(read):
            out += normalizer.feed(event)
    for event in decoder.close():
        out += normalizer.feed(event)
    out += normalizer.finish()
    return b"".join(out), normalizer


def check(golden: Golden, reads: list[bytes], include_usage: bool) -> None:
    body, normalizer = run_stream(golden, reads, include_usage)
    usage = check_stream(golden, parse_frames(body), include_usage=include_usage, created=CREATED)
    expected = golden.data["usage"]
    value = normalizer.usage
    if expected is None:
        assert value.source == "estimated"
    else:
        assert value.source == "upstream"
        assert (value.prompt_tokens, value.completion_tokens, value.total_tokens) == (
            expected["prompt_tokens"],
            expected["completion_tokens"],
            expected["total_tokens"],
        )
    if include_usage and usage is not None and expected is None:
        # An estimate where the upstream counted nothing: the metering value, shown once.
        assert usage["total_tokens"] == value.total_tokens


@pytest.mark.parametrize("include_usage", [True, False], ids=["usage", "no-usage"])
@pytest.mark.parametrize("golden", STREAMS, ids=_ids)
def test_stream_whole_and_recorded_reads(golden: Golden, include_usage: bool) -> None:
    check(golden, [golden.body()], include_usage)
    check(golden, golden.reads(), include_usage)


@pytest.mark.parametrize("golden", STREAMS, ids=_ids)
def test_stream_byte_by_byte(golden: Golden) -> None:
    body = golden.body()
    check(golden, [body[i : i + 1] for i in range(len(body))], include_usage=True)


@pytest.mark.parametrize("golden", STREAMS, ids=_ids)
def test_stream_random_splits(golden: Golden) -> None:
    body = golden.body()

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(cuts=st.lists(st.integers(0, len(body)), max_size=12), include_usage=st.booleans())
    def split_anywhere(cuts: list[int], include_usage: bool) -> None:
        points = [0, *sorted(cuts), len(body)]
        check(golden, [body[a:b] for a, b in itertools.pairwise(points)], include_usage)

    split_anywhere()


@pytest.mark.parametrize("golden", WHOLES, ids=_ids)
def test_whole_response(golden: Golden) -> None:
    raw = golden.body()
    ctx = context(golden, include_usage=False)
    if golden.data["outcome"] == "error":
        # An error body comes with an error status (the one the emulator serves it with): the
        # upstream client maps it.
        upstream = recording_status(golden.fixture.name)
        # Bedrock's error type comes in x-amzn-ErrorType, as the emulator sends it.
        error_type = recording_exception(golden.fixture.name)
        exc: ProxyError = status_error(upstream, "", "application/json", raw, None, error_type)
        status, body = to_openai_error(exc)
        assert status == ERROR_STATUS[golden.data["error"]["type"]]
        assert body["error"]["type"] == golden.data["error"]["type"]
        if golden.data["error"]["message"] is not None:  # null: any message (README.md)
            assert body["error"]["message"] == golden.data["error"]["message"]
        return
    result = normalize_response(raw, ctx)
    check_whole(golden, orjson.loads(result.body), created=CREATED)
    expected = golden.data["usage"]
    if expected is None:
        assert result.usage.source == "estimated"
    else:
        assert result.usage.total_tokens == expected["total_tokens"]


def test_every_stream_golden_is_replayed() -> None:
    assert len(STREAMS) > 40 and len(WHOLES) > 20
