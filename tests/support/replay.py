"""Replaying recorded upstream output and checking what a client receives against the goldens.

Shared by the normalizer tests (the sans-IO core alone) and the proxy tests (the running proxy
in front of the emulator): both produce client bytes, and ``check_stream``/``check_whole`` hold
them to docs/canonical-output.md and to the golden file written by reading the fixture.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from proxy.core.eventstream import EventStreamDecoder
from proxy.core.framing import Decoder, JSONArrayDecoder, NDJSONDecoder
from proxy.core.sse import SSEDecoder
from tests.support.schema import validate, validate_completion_chunk

HERE = Path(__file__).resolve().parents[1]  # tests/
FIXTURES = HERE / "fixtures" / "providers"
# Our own fixtures, one class of upstream behaviour each (tests/fixtures/contract/README.md).
CONTRACT = HERE / "fixtures" / "contract"
# Our own embeddings answers (tests/fixtures/embeddings/README.md): not chat, so no goldens.
EMBEDDINGS = HERE / "fixtures" / "embeddings"
# Our own Responses API answers (tests/fixtures/responses/README.md), for the pass-through.
RESPONSES = HERE / "fixtures" / "responses"
GOLDEN = HERE / "golden"

CLIENT_MODEL = "client-model"
MADE_ID = {
    "chat": re.compile(r"^chatcmpl-[0-9a-f]{32}$"),
    "completions": re.compile(r"^cmpl-[0-9a-f]{32}$"),
}
MADE_CALL_ID = re.compile(r"^call_[A-Za-z0-9]{24}$")
# The status a client gets for an error golden, by its type (docs/canonical-output.md section 4): an
# upstream's 4xx keeps its status; Anthropic's 529 "overloaded" is a 503.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "permission_error": 403,
    "rate_limit_error": 429,
    "service_unavailable": 503,
    "upstream_error": 502,
}


@dataclass(frozen=True)
class Golden:
    name: str
    data: dict[str, Any]
    root: Path = FIXTURES  # where its fixture is

    @property
    def fixture(self) -> Path:
        return self.root / self.data["fixture"]

    @property
    def endpoint(self) -> str:
        return str(self.data["endpoint"])

    @property
    def stream(self) -> bool:
        return bool(self.data["stream"])

    @property
    def n(self) -> int:
        """The ``n`` a client asks for to get this fixture's choices (1 for batch completions);
        a golden that has ``n`` is of an upstream that sends more choices than that to a client
        that sets no n (whose n is the API's default, 1)."""
        count = len(self.data["choices"])
        return int(self.data.get("n", count if self.endpoint == "chat" else 1))

    def body(self) -> bytes:
        """The upstream body bytes (the TCP-splits fixture holds its reads; they are joined)."""
        raw = self.fixture.read_bytes()
        if self.fixture.name == "sse-quirks.tcp-splits.json":
            return b"".join(self.reads())
        return raw

    def decoder(self) -> Decoder:
        """The decoder the proxy picks for this fixture's body, by the content type it is served
        with (proxy.core.framing.decoder_for; the emulator's types by extension)."""
        name = self.fixture.name
        if name.endswith(".ndjson"):
            return NDJSONDecoder()
        if ".stream.json-array." in name:
            return JSONArrayDecoder()
        if name.endswith(".eventstream"):
            return EventStreamDecoder()
        return SSEDecoder()

    def reads(self) -> list[bytes]:
        """The recorded socket reads, for the one fixture that has them; else the whole body."""
        if self.fixture.name == "sse-quirks.tcp-splits.json":
            spec = orjson.loads(self.fixture.read_bytes())
            return [base64.b64decode(read) for read in spec["reads_base64"]]
        return [self.fixture.read_bytes()]


def goldens() -> list[Golden]:
    """The shared fixtures' goldens, then those of our own (tests/golden/contract/)."""
    return [
        Golden(path.name.removesuffix(".json"), orjson.loads(path.read_bytes()), root)
        for folder, root in ((GOLDEN, FIXTURES), (GOLDEN / "contract", CONTRACT))
        for path in sorted(folder.glob("*.json"))
    ]


def recordings(into: Path) -> Path:
    """``into``, holding every fixture of the four folders (as links), for the emulator to
    serve: it serves one folder, and picks a recording by its file name."""
    into.mkdir(parents=True, exist_ok=True)
    for folder in (FIXTURES, CONTRACT, EMBEDDINGS, RESPONSES):
        for path in folder.iterdir():
            if path.is_file() and path.suffix != ".md":
                (into / path.name).symlink_to(path)
    return into


def parse_frames(body: bytes) -> list[Any]:
    """The client's SSE body as a list of payloads (dicts, or the string "[DONE]").

    Asserts the framing of docs/canonical-output.md section 2: only ``data: <one line>\\n\\n``
    events.
    """
    assert body.endswith(b"\n\n"), body[-200:]
    payloads: list[Any] = []
    for frame in body[:-2].split(b"\n\n"):
        assert frame.startswith(b"data: "), frame[:200]
        data = frame[6:]
        assert b"\n" not in data and b"\r" not in data, frame[:200]
        payloads.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return payloads


def dechunk(body: bytes) -> bytes:
    """The data of an HTTP/1.1 chunked body, its framing checked; the last (empty) chunk, if
    it came, must end it."""
    data: list[bytes] = []
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", body[:100]
            break
        assert body[size : size + 2] == b"\r\n", body[:100]
        data.append(body[:size])
        body = body[size + 2 :]
    return b"".join(data)


def _joined(parts: list[str]) -> str | None:
    text = "".join(parts)
    return text or None


def check_stream(
    golden: Golden,
    payloads: list[Any],
    *,
    include_usage: bool,
    created: int | None,
    model: str = CLIENT_MODEL,
) -> dict[str, Any] | None:
    """Check a streamed answer against docs/canonical-output.md and the golden; returns its
    usage."""
    data = golden.data
    chat = golden.endpoint == "chat"
    assert payloads, "an empty stream"
    if data["outcome"] == "error":
        last = payloads[-1]
        assert isinstance(last, dict) and set(last) == {"error"}, last
        validate(last, "ErrorResponse")
        assert last["error"]["type"] == data["error"]["type"]
        if data["error"]["message"] is not None:
            assert last["error"]["message"] == data["error"]["message"]
        assert "[DONE]" not in payloads
        chunks = payloads[:-1]
    else:
        assert payloads[-1] == "[DONE]" and payloads.count("[DONE]") == 1, payloads[-3:]
        chunks = payloads[:-1]
    assert all(isinstance(chunk, dict) and "error" not in chunk for chunk in chunks)

    envelope = None
    texts: dict[int, dict[str, list[str]]] = {}
    calls: dict[int, list[dict[str, Any]]] = {}
    finish: dict[int, str] = {}
    seen_role: set[int] = set()
    usage = None
    fingerprints = set()
    tiers: list[str | None] = []
    for position, chunk in enumerate(chunks):
        if chat:
            validate(chunk, "CreateChatCompletionStreamResponse")
        else:
            validate_completion_chunk(chunk)
        assert chunk["object"] == ("chat.completion.chunk" if chat else "text_completion")
        assert chunk["model"] == model
        ids = (chunk["id"], chunk["created"])
        assert envelope is None or ids == envelope, "id and created must not change"
        envelope = ids
        if chunk.get("system_fingerprint"):
            fingerprints.add(chunk["system_fingerprint"])
        tiers.append(chunk.get("service_tier"))
        if "usage" in chunk:
            assert include_usage, "usage shown to a client that did not ask"
            assert usage is None, "usage shown twice"
            assert chunk["choices"] == [] and position == len(chunks) - 1, "usage must come last"
            usage = chunk["usage"]
            continue
        assert chunk["choices"], "a chunk with nothing in it"
        for choice in chunk["choices"]:
            index = choice["index"]
            assert index not in finish, f"choice {index} has a chunk after its finish_reason"
            if choice["finish_reason"] is not None:
                finish[index] = choice["finish_reason"]
            part = texts.setdefault(index, {"content": [], "reasoning_content": [], "refusal": []})
            if not chat:
                part["content"].append(choice["text"])
                continue
            delta = choice["delta"]
            if index not in seen_role:
                assert delta.get("role") == "assistant", (
                    f"choice {index}'s first chunk lacks its role"
                )
                seen_role.add(index)
            else:
                assert "role" not in delta, f"choice {index} repeats its role"
            for key in ("content", "reasoning_content", "refusal"):
                if delta.get(key) is not None:
                    part[key].append(delta[key])
            for fragment in delta.get("tool_calls", []):
                made = calls.setdefault(index, [])
                if fragment["index"] == len(made):
                    assert set(fragment) == {"index", "id", "type", "function"}, fragment
                    assert fragment["type"] == "function" and fragment["function"]["name"]
                    made.append(
                        {
                            "id": fragment["id"],
                            "name": fragment["function"]["name"],
                            "arguments": fragment["function"].get("arguments", ""),
                        }
                    )
                else:
                    assert fragment["index"] < len(made), "tool call indexes must be dense from 0"
                    assert set(fragment) == {"index", "function"} and set(fragment["function"]) == {
                        "arguments"
                    }, fragment
                    made[fragment["index"]]["arguments"] += fragment["function"]["arguments"]

    if include_usage and data["outcome"] == "ok":
        assert usage is not None, "the client asked for usage and got none"
    assert envelope is not None or data["outcome"] == "error"
    if envelope is not None:
        chunk_id, chunk_created = envelope
        if data["id"] is not None:
            assert chunk_id == data["id"]
        else:
            assert MADE_ID[golden.endpoint].match(chunk_id), chunk_id
        expected_created = data["created"] if data["created"] is not None else created
        if expected_created is not None:
            assert chunk_created == expected_created
        else:
            assert isinstance(chunk_created, int) and chunk_created > 10**9
        assert fingerprints == (
            {data["system_fingerprint"]} if data["system_fingerprint"] else set()
        )
        # Once given, on every chunk after (docs/canonical-output.md section 1).
        tier = data["service_tier"]
        given = tiers[tiers.index(tier) :] if tier in tiers else []
        assert set(tiers) <= {tier, None} and (tier is None or set(given) == {tier}), tiers

    for key, want in data["choices"].items():
        index = int(key)
        got = texts.get(index, {"content": [], "reasoning_content": [], "refusal": []})
        assert _joined(got["content"]) == want["content"], f"choice {index} content"
        assert _joined(got["reasoning_content"]) == want["reasoning_content"], (
            f"choice {index} reasoning"
        )
        assert _joined(got["refusal"]) == want["refusal"], f"choice {index} refusal"
        _check_calls(calls.get(index, []), want["tool_calls"])
        if data["outcome"] == "ok":
            assert finish.get(index) == want["finish_reason"], f"choice {index} finish_reason"
    if data["outcome"] == "ok":
        assert set(finish) == {int(key) for key in data["choices"]}
    if usage is not None and data["usage"] is not None:
        check_usage(usage, data["usage"])
    return usage


def _check_calls(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want), (got, want)
    for made, expected in zip(got, want, strict=True):
        if expected["id"] is None:
            assert MADE_CALL_ID.match(made["id"]), made["id"]
        else:
            assert made["id"] == expected["id"]
        assert made["name"] == expected["name"]
        assert made["arguments"] == expected["arguments"]


def check_usage(usage: dict[str, Any], want: dict[str, Any]) -> None:
    validate(usage, "CompletionUsage")
    assert usage["prompt_tokens"] == want["prompt_tokens"]
    assert usage["completion_tokens"] == want["completion_tokens"]
    assert usage["total_tokens"] == want["total_tokens"]
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens")
    reasoning = usage.get("completion_tokens_details", {}).get("reasoning_tokens")
    assert cached == want["cached_tokens"], "cached_tokens"
    assert reasoning == want["reasoning_tokens"], "reasoning_tokens"


def check_whole(
    golden: Golden, body: dict[str, Any], *, created: int | None, model: str = CLIENT_MODEL
) -> None:
    """Check a non-streamed answer against docs/canonical-output.md section 1 and the golden."""
    data = golden.data
    chat = golden.endpoint == "chat"
    validate(body, "CreateChatCompletionResponse" if chat else "CreateCompletionResponse")
    assert body["object"] == ("chat.completion" if chat else "text_completion")
    assert body["model"] == model
    if data["id"] is not None:
        assert body["id"] == data["id"]
    else:
        assert MADE_ID[golden.endpoint].match(body["id"])
    if data["created"] is not None:
        assert body["created"] == data["created"]
    elif created is not None:
        assert body["created"] == created
    assert body.get("system_fingerprint") == data["system_fingerprint"]
    assert body.get("service_tier") == data["service_tier"]
    assert len(body["choices"]) == len(data["choices"])
    for choice in body["choices"]:
        want = data["choices"][str(choice["index"])]
        assert choice["finish_reason"] == want["finish_reason"]
        if chat:
            message = choice["message"]
            assert message["role"] == "assistant" and "refusal" in message
            assert (message["content"] or None) == want["content"]
            assert message.get("reasoning_content") == want["reasoning_content"]
            assert message["refusal"] == want["refusal"]
            calls = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in message.get("tool_calls", [])
            ]
            assert ("tool_calls" in message) == bool(calls)
            _check_calls(calls, want["tool_calls"])
        else:
            assert (choice["text"] or None) == want["content"]
    assert "usage" in body
    if data["usage"] is not None:
        check_usage(body["usage"], data["usage"])
