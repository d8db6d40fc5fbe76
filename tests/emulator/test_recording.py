"""Recordings: how a file's name says how it is served, how it is split (joined, the pieces are
always exactly the input), and the recordings packaged with the emulator."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from pytest_aiohttp import AiohttpServer

from proxy.emulator import RECORDINGS_DIR, build_emulator_app
from proxy.emulator.bedrock import frame_lines
from proxy.emulator.recording import (
    content_type,
    parse_recording,
    recording_status,
    split_array,
    split_events,
    split_lines,
)
from tests.emulator.exchange import packaged, post, served_type

FIXTURES = Path(__file__).parents[1] / "fixtures"
CATALOGUE = FIXTURES / "providers"
EMBEDDINGS = FIXTURES / "embeddings"
RESPONSES = FIXTURES / "responses"


# Packaged files that are ours, not the catalogue's, and the fixture each is a copy of.
OWN = {
    "openai.embeddings.json": EMBEDDINGS / "contract.openai.embeddings.json",
    "openai.responses.json": RESPONSES / "contract.openai.responses.json",
    "openai.responses.stream.sse": RESPONSES / "contract.openai.responses.stream.sse",
    "vertex.predict.json": EMBEDDINGS / "contract.vertex.predict.json",
}
# Written in the shape of Titan Text Embeddings V2's InvokeModel answer, for the demo: no copy.
WRITTEN = frozenset({"bedrock.invoke.json"})
# Readable recordings of the catalogue's binary event streams: framed, they are its bytes.
FRAMED = {
    "bedrock.converse-stream.eventstream.jsonl": CATALOGUE / "bedrock.converse-stream.eventstream"
}


PACKAGED = (
    "anthropic.count-tokens.json",  # written in the shape of Anthropic's reference: no copy
    "anthropic.messages.json",
    "anthropic.messages.stream.sse",
    "azure.chat.stream.model-router.sse",
    "bedrock.converse-stream.eventstream.jsonl",
    "bedrock.converse.json",
    "bedrock.invoke.json",
    "cohere.chat.json",
    "cohere.chat.stream.sse",
    "deepseek.chat.json",
    "deepseek.chat.stream.reasoning.sse",
    "friendli.chat.json",
    "friendli.chat.stream.sse",
    "friendli.completions.json",
    "friendli.completions.stream.sse",
    "gemini.generate-content.json",
    "gemini.generate-content.stream.json-array.json",
    "gemini.generate-content.stream.sse",
    "groq.chat.json",
    "groq.chat.stream.sse",
    "maritaca.chat-inference.json",
    "maritaca.chat-inference.stream.sse",
    "maritaca.chat.json",
    "mistral.chat.json",
    "mistral.chat.stream.sse",
    "ollama.api-chat.json",
    "ollama.api-chat.stream.ndjson",
    "openai.chat.json",
    "openai.chat.stream.sse",
    "openai.chat.stream.tool-calls.sse",
    "openai.completions.json",
    "openai.completions.stream.sse",
    "openai.embeddings.json",
    "openai.responses.json",
    "openai.responses.stream.sse",
    "tgi.generate-stream.sse",
    "vertex.predict.json",
)


@pytest.mark.parametrize(
    ("data", "events"),
    [
        (b"data: a\n\ndata: b\n\n", [b"data: a\n\n", b"data: b\n\n"]),
        (b"data: a\r\n\r\ndata: b\r\n\r\n", [b"data: a\r\n\r\n", b"data: b\r\n\r\n"]),
        (b"data: a\r\rdata: b\r\r", [b"data: a\r\r", b"data: b\r\r"]),
        (b"data: a\r\n\ndata: b\n\r\n", [b"data: a\r\n\n", b"data: b\n\r\n"]),
        (b"data: a\r\ndata: b\r\n", [b"data: a\r\ndata: b\r\n"]),
        (b": ping\n\ndata: a\n\n", [b": ping\n\n", b"data: a\n\n"]),
        (b"data: a\n\ndata: [DONE]\n", [b"data: a\n\n", b"data: [DONE]\n"]),
        (b"data: a\n\ndata: [DONE]", [b"data: a\n\n", b"data: [DONE]"]),
        (b"\n\ndata: a\n\n\n", [b"\n", b"\n", b"data: a\n\n", b"\n"]),
        (b"", []),
    ],
)
def test_split_events(data: bytes, events: list[bytes]) -> None:
    assert list(split_events(data)) == events


@pytest.mark.parametrize("name", [n for n in PACKAGED if n.endswith(".sse")])
def test_split_events_keeps_packaged_streams_whole(name: str) -> None:
    events = split_events(packaged(name))
    assert b"".join(events) == packaged(name)
    assert all(event.endswith((b"\n\n", b"\r\n\r\n")) for event in events[:-1])


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b'{"a":1}\n{"b":2}\n', [b'{"a":1}\n', b'{"b":2}\n']),
        (b'{"a":"x\ry"}\n{"b":2}', [b'{"a":"x\ry"}\n', b'{"b":2}']),
    ],
)
def test_split_lines(data: bytes, lines: list[bytes]) -> None:
    assert list(split_lines(data)) == lines


@pytest.mark.parametrize(
    ("data", "pieces"),
    [
        (b'[{"a":1}\r\n,\r\n{"b":2}\r\n]', [b'[{"a":1}\r\n', b',\r\n{"b":2}\r\n', b"]"]),
        (b'[{"a":[1,2]},{"b":{"c":3}}]\n', [b'[{"a":[1,2]}', b',{"b":{"c":3}}', b"]\n"]),
        # Brackets, commas and escaped quotes inside strings never split.
        (
            b'[{"t":"a,]\\"}["},{"u":"\\\\"}]',
            [b'[{"t":"a,]\\"}["}', b',{"u":"\\\\"}', b"]"],
        ),
        (b'  [1, "x"]', [b"  [1", b', "x"', b"]"]),
        (b"[]", [b"[", b"]"]),
        # An array cut short keeps what it has; a body that is no array stays whole.
        (b'[{"a":1},{"b"', [b'[{"a":1}', b',{"b"']),
        (b'{"error":{"code":429}}', [b'{"error":{"code":429}}']),
        (b"", []),
    ],
)
def test_split_array(data: bytes, pieces: list[bytes]) -> None:
    assert list(split_array(data)) == pieces
    assert b"".join(pieces) == data


def test_split_array_gives_the_gemini_recording_one_element_a_piece() -> None:
    data = packaged("gemini.generate-content.stream.json-array.json")
    pieces = split_array(data)
    assert b"".join(pieces) == data
    assert len(pieces) == 4
    assert pieces[0].startswith(b"[{") and pieces[-1] == b"]"
    elements = [orjson.loads(piece.lstrip(b"[,")) for piece in pieces[:-1]]
    assert [element["responseId"] for element in elements] == ["bH6LaZW8Fp_3nsEPqtaSwQ4"] * 3


@pytest.mark.parametrize(
    ("name", "kind", "streamed"),
    [
        ("g.generate-content.stream.json-array.json", "application/json", True),
        ("g.generate-content.json", "application/json", False),
        ("o.api-chat.stream.ndjson", "application/x-ndjson", True),
        ("a.messages.stream.sse", "text/event-stream", True),
    ],
)
def test_recording_format_follows_the_name(name: str, kind: str, streamed: bool) -> None:
    recording = parse_recording(name, b"[1,2]")
    assert (recording.content_type, recording.streamed) == (kind, streamed)
    assert content_type("." + name.split(".", 1)[1]) == kind  # All of the name after the model.


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("openai.chat.json", 200),
        ("openai.error.json", 400),
        ("gemini.error.429.json", 429),
        ("x.error.503.json", 503),
        ("anthropic.error.overloaded.json", 529),
        ("openrouter.chat.stream.error.sse", 200),
        ("anthropic.messages.stream.error.sse", 200),
        ("bedrock.error.ThrottlingException.json", 429),
        ("bedrock.error.ModelErrorException.json", 424),
        ("bedrock.error.429.ModelNotReadyException.json", 429),
        ("bedrock.converse-stream.error.eventstream.jsonl", 200),
    ],
)
def test_recording_status(name: str, status: int) -> None:
    assert recording_status(name) == status


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("g.error.429.json", 429),
        ("a.error.overloaded.json", 529),
        ("o.error.json", 400),
        ("r.chat.stream.error.sse", 200),
    ],
)
async def test_error_recording_status(
    session: aiohttp.ClientSession,
    aiohttp_server: AiohttpServer,
    tmp_path: Path,
    name: str,
    status: int,
) -> None:
    (tmp_path / name).write_bytes(b'{"error":{"message":"recorded"}}')
    server = await aiohttp_server(build_emulator_app(tmp_path))
    served_status, _, body = await post(session, server, "/v1/chat/completions", {"model": name})
    assert (served_status, body) == (status, b'{"error":{"message":"recorded"}}')


def test_packaged_recordings_are_the_listed_ones() -> None:
    names = sorted(path.name for path in RECORDINGS_DIR.iterdir() if path.name != "README.md")
    assert names == sorted(PACKAGED)


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_recording_is_a_copy_of_the_catalogue(name: str) -> None:
    source = FRAMED.get(name, OWN.get(name, CATALOGUE / name))
    if name in WRITTEN or not source.exists():
        pytest.skip(f"{source} is not there to compare with")
    served = b"".join(frame_lines(packaged(name))) if name in FRAMED else packaged(name)
    assert served == source.read_bytes()


@pytest.mark.parametrize("name", PACKAGED)
async def test_each_packaged_recording_is_served_by_name(
    session: aiohttp.ClientSession, emulator: TestServer, name: str
) -> None:
    path = "/api/chat/inference" if "chat-inference" in name else "/v1/chat/completions"
    status, headers, body = await post(session, emulator, path, {"model": name})
    # Bedrock's readable stream recordings are served framed (test_emulator_bedrock.py).
    framed = b"".join(frame_lines(packaged(name))) if name.endswith(".jsonl") else packaged(name)
    assert (status, body) == (200, framed)
    assert headers["Content-Type"] == served_type(name)
