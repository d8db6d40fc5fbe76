"""Bedrock's paths: Converse, ConverseStream in AWS event-stream frames, InvokeModel, the SigV4
check in front of them, Bedrock's error envelope, and the faults on its stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer
from yarl import URL

# The aws extra's (pyproject.toml): the lowest-versions pass runs without it.
pytest.importorskip("botocore")

from proxy.core.eventstream import EventStreamDecoder
from proxy.emulator import build_emulator_app
from proxy.emulator.bedrock import frame_lines, split_frames
from proxy.emulator.cloud import CloudAuth
from proxy.emulator.sigv4 import AwsKey
from tests.emulator.exchange import packaged, read_writes
from tests.support.cloud import AWS_SECRET, BEDROCK_API_KEY, bedrock_headers, cloud_auth

EVENTSTREAM = "application/vnd.amazon.eventstream"
BODY = b'{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}'
CLAUDE = "us.anthropic.claude-sonnet-4-20250514-v1:0"
ARN = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/x"


@pytest.fixture
async def signed_emulator(aiohttp_server: AiohttpServer, tmp_path: Path) -> TestServer:
    """The packaged recordings, and two named by model ids a recording's name cannot hold."""
    for name in ("bedrock.converse.json", "bedrock.converse-stream.eventstream.jsonl"):
        (tmp_path / name).write_bytes(packaged(name))
    (tmp_path / "us.anthropic.claude-sonnet-4-20250514-v1_0.converse.json").write_bytes(
        packaged("bedrock.converse.json")
    )
    profile = "arn_aws_bedrock_us-east-1_123456789012_inference-profile_x"
    (tmp_path / f"{profile}.converse-stream.eventstream.jsonl").write_bytes(
        packaged("bedrock.converse-stream.eventstream.jsonl")
    )
    (tmp_path / "bedrock.error.ModelNotReadyException.json").write_bytes(b'{"message":"warming"}')
    auth = cloud_auth(bedrock_api_key=True)
    return await aiohttp_server(build_emulator_app(tmp_path, cloud=auth))


def model_url(server: TestServer, model: str, operation: str) -> str:
    return str(server.make_url("/")) + f"model/{quote(model, safe='')}/{operation}"


async def signed_post(
    session: aiohttp.ClientSession, url: str, body: bytes = BODY, **signing: Any
) -> tuple[int, dict[str, str], bytes]:
    headers = bedrock_headers(url, body, **signing)
    async with session.post(URL(url, encoded=True), data=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


def decoded(data: bytes) -> list[tuple[str | None, object]]:
    decoder = EventStreamDecoder()
    events = [*decoder.feed(data), *decoder.close()]
    return [(event.event, orjson.loads(event.data)) for event in events]


def expected_events(name: str) -> list[tuple[str | None, object]]:
    lines = [orjson.loads(line) for line in packaged(name).splitlines() if line.strip()]
    return [(kind, {kind: payload}) for line in lines for kind, payload in line.items()]


@pytest.mark.parametrize("model", ["bedrock", CLAUDE])
async def test_converse_signed_by_botocore_is_answered(
    session: aiohttp.ClientSession, signed_emulator: TestServer, model: str
) -> None:
    status, headers, body = await signed_post(
        session, model_url(signed_emulator, model, "converse")
    )
    assert (status, headers["Content-Type"]) == (200, "application/json")
    assert body == packaged("bedrock.converse.json")


@pytest.mark.parametrize("model", ["bedrock", ARN])
async def test_converse_stream_is_served_in_event_stream_frames(
    session: aiohttp.ClientSession, signed_emulator: TestServer, model: str
) -> None:
    url = model_url(signed_emulator, model, "converse-stream")
    headers = bedrock_headers(url, BODY)
    async with session.post(URL(url, encoded=True), data=BODY, headers=headers) as resp:
        assert (resp.status, resp.headers["Content-Type"]) == (200, EVENTSTREAM)
        writes = await read_writes(resp)
    name = "bedrock.converse-stream.eventstream.jsonl"
    # One frame per write, each a whole message, and they decode to the recording's lines.
    assert writes == list(frame_lines(packaged(name)))
    assert decoded(b"".join(writes)) == expected_events(name)


async def test_request_log_shows_the_signed_request(
    session: aiohttp.ClientSession, signed_emulator: TestServer
) -> None:
    await signed_post(session, model_url(signed_emulator, CLAUDE, "converse"))
    async with session.get(signed_emulator.make_url("/_emulator/requests")) as resp:
        (entry,) = await resp.json()
    assert entry["path"] == f"/model/{CLAUDE}/converse"
    assert entry["headers"]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert entry["json"] == orjson.loads(BODY)


@pytest.mark.parametrize(
    ("signing", "error_type"),
    [
        ({"secret": "wrong"}, "InvalidSignatureException"),
        ({"key_id": "AKIDUNKNOWN"}, "UnrecognizedClientException"),
        ({"session_token": "stray"}, "UnrecognizedClientException"),
    ],
)
async def test_bad_signatures_get_bedrocks_403(
    session: aiohttp.ClientSession,
    signed_emulator: TestServer,
    signing: dict[str, Any],
    error_type: str,
) -> None:
    url = model_url(signed_emulator, CLAUDE, "converse")
    status, headers, body = await signed_post(session, url, **signing)
    assert status == 403
    assert headers["x-amzn-ErrorType"] == (
        f"{error_type}:http://internal.amazon.com/coral/com.amazon.coral.service/"
    )
    assert list(orjson.loads(body)) == ["message"]


async def test_a_body_changed_after_signing_is_refused(
    session: aiohttp.ClientSession, signed_emulator: TestServer
) -> None:
    url = model_url(signed_emulator, CLAUDE, "converse")
    headers = bedrock_headers(url, BODY)
    changed = BODY.replace(b"Hi", b"Ho")
    async with session.post(URL(url, encoded=True), data=changed, headers=headers) as resp:
        assert resp.status == 403
        assert resp.headers["x-amzn-ErrorType"].startswith("InvalidSignatureException:")


async def test_unsigned_requests_are_refused(
    session: aiohttp.ClientSession, signed_emulator: TestServer
) -> None:
    url = URL(model_url(signed_emulator, "bedrock", "converse"), encoded=True)
    async with session.post(url, data=BODY) as resp:
        assert resp.status == 403
        assert resp.headers["x-amzn-ErrorType"].startswith("MissingAuthenticationTokenException:")
        assert await resp.json() == {"message": "Missing Authentication Token"}


@pytest.mark.parametrize(("key", "status"), [(BEDROCK_API_KEY, 200), ("ABSKnotours", 403)])
async def test_bedrock_api_keys_are_bearer_tokens(
    session: aiohttp.ClientSession, signed_emulator: TestServer, key: str, status: int
) -> None:
    url = URL(model_url(signed_emulator, "bedrock", "converse"), encoded=True)
    async with session.post(url, data=BODY, headers={"Authorization": f"Bearer {key}"}) as resp:
        assert resp.status == status
        if status == 403:
            assert resp.headers["x-amzn-ErrorType"].startswith("AccessDeniedException:")


async def test_without_credentials_bedrock_is_not_checked(
    session: aiohttp.ClientSession, emulator: TestServer
) -> None:
    async with session.post(emulator.make_url("/model/bedrock/invoke"), data=BODY) as resp:
        assert (resp.status, await resp.read()) == (200, packaged("bedrock.invoke.json"))


async def test_signed_with_the_secret_the_emulator_was_given(
    session: aiohttp.ClientSession, aiohttp_server: AiohttpServer
) -> None:
    server = await aiohttp_server(
        build_emulator_app(cloud=CloudAuth(aws_keys={"AKID": AwsKey("s3cret")}))
    )
    url = model_url(server, "bedrock", "invoke")
    assert (await signed_post(session, url, key_id="AKID", secret="s3cret"))[0] == 200
    assert (await signed_post(session, url, key_id="AKID", secret=AWS_SECRET))[0] == 403


@pytest.mark.parametrize(
    ("model", "status", "error_type"),
    [
        ("bedrock@status=429", 429, "ThrottlingException"),
        ("bedrock@status=503", 503, "ServiceUnavailableException"),
        ("bedrock@status=424", 424, "ModelErrorException"),
        ("bedrock@status=400", 400, "ValidationException"),
        ("bedrock.error.ModelNotReadyException.json", 429, "ModelNotReadyException"),
        ("nothing-recorded", 404, "ResourceNotFoundException"),
    ],
)
async def test_errors_in_bedrocks_envelope(
    session: aiohttp.ClientSession,
    signed_emulator: TestServer,
    model: str,
    status: int,
    error_type: str,
) -> None:
    got, headers, body = await signed_post(session, model_url(signed_emulator, model, "converse"))
    assert got == status
    assert headers["x-amzn-ErrorType"] == (
        f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    )
    assert list(orjson.loads(body)) == ["message"]
    # Bedrock's throttling carries no delay: the client backs off on its own.
    assert "Retry-After" not in headers


async def test_reset_after_cuts_the_binary_stream(
    session: aiohttp.ClientSession, signed_emulator: TestServer
) -> None:
    url = model_url(signed_emulator, "bedrock@reset-after=100", "converse-stream")
    received = b""
    headers = bedrock_headers(url, BODY)
    async with session.post(URL(url, encoded=True), data=BODY, headers=headers) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for data in resp.content.iter_any():
                received += data
    frames = b"".join(frame_lines(packaged("bedrock.converse-stream.eventstream.jsonl")))
    assert frames.startswith(received)
    assert 0 < len(received) <= 100


async def test_endless_converse_stream_decodes(
    session: aiohttp.ClientSession, signed_emulator: TestServer
) -> None:
    url = model_url(signed_emulator, "x@endless", "converse-stream")
    headers = bedrock_headers(url, BODY)
    async with session.post(URL(url, encoded=True), data=BODY, headers=headers) as resp:
        assert resp.headers["Content-Type"] == EVENTSTREAM
        writes = await read_writes(resp, 3)
    events = decoded(b"".join(writes))
    assert [name for name, _ in events] == ["messageStart", *["contentBlockDelta"] * 3]
    assert events[1][1] == {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "x "}}}


def test_exception_and_error_lines_become_their_frames() -> None:
    lines = (
        b'{"messageStart": {"role": "assistant"}}\n'
        b"\n"
        b'{"throttlingException": {"message": "Too many requests"}}\n'
        b'{"error": {"code": "InternalFailure", "message": "boom"}}\n'
    )
    frames = frame_lines(lines)
    assert len(frames) == 3
    assert split_frames(b"".join(frames)) == frames
    assert decoded(b"".join(frames)) == [
        ("messageStart", {"messageStart": {"role": "assistant"}}),
        ("throttlingException", {"throttlingException": {"message": "Too many requests"}}),
        ("error", {"error": {"code": "InternalFailure", "message": "boom"}}),
    ]


@pytest.mark.parametrize("line", [b"[1]", b'{"a": {}, "b": {}}', b'{"error": "x"}'])
def test_a_line_that_is_no_frame_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError, match="line 1"):
        frame_lines(line)


def test_split_frames_keeps_every_byte() -> None:
    frames = b"".join(frame_lines(packaged("bedrock.converse-stream.eventstream.jsonl")))
    assert b"".join(split_frames(frames)) == frames
    # A message cut short stays one last piece.
    assert split_frames(frames[:-5])[-1] == split_frames(frames)[-1][:-5]
    assert split_frames(b"") == ()


CATALOGUE = Path(__file__).parents[1] / "fixtures" / "providers"


@pytest.mark.parametrize(
    ("name", "status", "error_type"),
    [
        ("bedrock.converse-stream.eventstream", 200, None),
        ("bedrock.converse-stream.error.throttling.eventstream", 200, None),
        ("bedrock.error.429.ThrottlingException.json", 429, "ThrottlingException"),
        ("bedrock.error.403.AccessDeniedException.json", 403, "AccessDeniedException"),
    ],
)
async def test_catalogue_fixtures_are_served_by_name(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    name: str,
    status: int,
    error_type: str | None,
) -> None:
    fixture = CATALOGUE / name
    if not fixture.exists():
        pytest.skip(f"{fixture} is not there")
    (tmp_path / name).write_bytes(fixture.read_bytes())
    server = await aiohttp_server(build_emulator_app(tmp_path))
    url = URL(model_url(server, name, "converse-stream"), encoded=True)
    async with session.post(url, data=BODY) as resp:
        assert resp.status == status
        assert resp.headers.get("x-amzn-ErrorType", "").partition(":")[0] == (error_type or "")
        if status != 200:
            assert await resp.read() == fixture.read_bytes()
            return
        writes = await read_writes(resp)
    # Binary recordings are written as they are, a whole message at a time.
    assert writes == list(split_frames(fixture.read_bytes()))
    assert b"".join(writes) == fixture.read_bytes()
