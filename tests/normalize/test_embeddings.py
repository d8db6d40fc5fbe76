"""``normalize_embeddings``: every dialect's answer (tests/fixtures/embeddings/) as OpenAI's
CreateEmbeddingResponse with strict keys, in the encoding the client asked for, in order, with
usage; and every answer that cannot be made canonical a 502 that says why."""

from __future__ import annotations

import base64
import copy
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.core.errors import UpstreamError, UpstreamProtocolError, to_openai_error
from proxy.core.fix_names import FIX_ENVELOPE, FIX_EXTRAS, FIX_USAGE
from proxy.normalize import API_FAMILIES, Normalized, RequestContext, normalize_embeddings
from tests.support.schema import validate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "embeddings"
TWO = ["hello", "goodbye"]
# The two vectors that the Gemini, Cohere and Ollama answers share (float32's shortest
# spellings, as those APIs write them), and their float32 values as base64, little-endian.
HELLO = [-0.02486927, -0.037285868, -0.027283417, 0.036255494]
HELLO += [-0.004311894, 0.0740467, 0.013254627, -0.044273112]
GOODBYE = [0.01804763, 0.0044878656, -0.05746729, 0.0042953994]
GOODBYE += [-0.07813087, -0.020094845, 0.0058218776, 0.02979561]
HELLO_BASE64 = "pLrLvBG5GL15gd+8pIAUPcpKjbvMpZc97ylZPLlXNb0="
GOODBYE_BASE64 = "oNiTPPIOkzvSYmu9bMCMOxQDoL3ynaS8c8W+O+wV9Dw="
# Worked by hand: 1.0 is 0x3F800000, -2.0 0xC0000000, 0.5 0x3F000000, each little-endian.
KNOWN = ([1.0, -2.0, 0.5], "AACAPwAAAMAAAAA/")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def ctx(dialect: str = "openai", encoding: str = "float", prompt: object = "Hi") -> RequestContext:
    return RequestContext(
        "embeddings",
        "client-model",
        1_733_100_000,
        dialect=dialect,
        prompt=prompt,
        encoding=encoding,
    )


def float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def decoded(text: str) -> list[float]:
    packed = base64.b64decode(text, validate=True)
    return list(struct.unpack(f"<{len(packed) // 4}f", packed))


def canonical(normalized: Normalized, encoding: str) -> dict[str, Any]:
    """The client's body, held to CreateEmbeddingResponse. OpenAI's schema types a vector as
    numbers only, so a base64 one is checked as the floats it decodes to."""
    body: dict[str, Any] = orjson.loads(normalized.body)
    checked = copy.deepcopy(body)
    for item in checked["data"]:
        if encoding == "base64":
            assert isinstance(item["embedding"], str)
            item["embedding"] = decoded(item["embedding"])
        else:
            assert isinstance(item["embedding"], list)
    validate(checked, "CreateEmbeddingResponse")
    assert list(body) == ["object", "data", "model", "usage"]
    assert [item["index"] for item in body["data"]] == list(range(len(body["data"])))
    assert body["model"] == "client-model"
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"]
    return body


def answer(data: list[Any], tokens: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": vector}
            for index, vector in enumerate(data)
        ],
        "model": "client-model",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


# Every dialect's answer, both encodings.

NATIVE = [
    # Gemini counts nothing: "hello" and "goodbye" are 12 characters, 3 tokens by estimate.
    ("gemini", "contract.gemini.batch-embed-contents.json", 3, "estimated"),
    # Vertex counts per input (statistics.token_count): 1 + 2.
    ("vertex_google", "contract.vertex.predict.json", 3, "upstream"),
    ("cohere", "contract.cohere.embed.json", 2, "upstream"),
    ("ollama", "contract.ollama.api-embed.json", 8, "upstream"),
]


@pytest.mark.parametrize(("dialect", "name", "tokens", "source"), NATIVE)
def test_native_answer_as_floats(dialect: str, name: str, tokens: int, source: str) -> None:
    normalized = normalize_embeddings(fixture(name), ctx(dialect, prompt=TWO))
    assert canonical(normalized, "float") == answer([HELLO, GOODBYE], tokens)
    assert (normalized.usage.prompt_tokens, normalized.usage.total_tokens) == (tokens, tokens)
    assert normalized.usage.completion_tokens == 0
    assert normalized.usage.source == source
    # A translation is no fix; an estimate is counted as one, as for chat.
    assert normalized.fixes == ({FIX_USAGE} if source == "estimated" else set())


@pytest.mark.parametrize(("dialect", "name", "tokens", "source"), NATIVE)
def test_native_answer_as_base64(dialect: str, name: str, tokens: int, source: str) -> None:
    normalized = normalize_embeddings(fixture(name), ctx(dialect, "base64", TWO))
    assert canonical(normalized, "base64") == answer([HELLO_BASE64, GOODBYE_BASE64], tokens)
    assert normalized.usage.source == source


def test_openai_floats_pass_as_they_came() -> None:
    raw = fixture("contract.openai.embeddings.json")
    normalized = normalize_embeddings(raw, ctx())
    vector = orjson.loads(raw)["data"][0]["embedding"]
    assert canonical(normalized, "float") == answer([vector], 5)
    assert normalized.fixes == frozenset()
    assert normalized.usage.source == "upstream"


def test_floats_become_the_base64_openai_sends_for_them() -> None:
    # The two recordings are the same vector, as OpenAI answers each encoding.
    expected = orjson.loads(fixture("contract.openai.embeddings.base64.json"))["data"][0]
    normalized = normalize_embeddings(
        fixture("contract.openai.embeddings.json"), ctx(encoding="base64")
    )
    assert canonical(normalized, "base64") == answer([expected["embedding"]], 5)


def test_base64_becomes_the_floats_openai_sends_for_it() -> None:
    expected = orjson.loads(fixture("contract.openai.embeddings.json"))["data"][0]
    normalized = normalize_embeddings(fixture("contract.openai.embeddings.base64.json"), ctx())
    assert canonical(normalized, "float") == answer([expected["embedding"]], 5)


def test_base64_passes_as_it_came() -> None:
    raw = fixture("contract.openai.embeddings.base64.json")
    normalized = normalize_embeddings(raw, ctx(encoding="base64"))
    assert canonical(normalized, "base64") == answer([orjson.loads(raw)["data"][0]["embedding"]], 5)


@pytest.mark.parametrize("vector", [HELLO, GOODBYE, KNOWN[0], [0.0], [-0.0, 3.4028234663852886e38]])
def test_float32_values_round_trip_exactly(vector: list[float]) -> None:
    values = float32(vector)
    upstream = orjson.dumps(answer([values], 1))
    as_base64 = orjson.loads(normalize_embeddings(upstream, ctx(encoding="base64")).body)
    text = as_base64["data"][0]["embedding"]
    again = orjson.loads(normalize_embeddings(orjson.dumps(answer([text], 1)), ctx()).body)
    assert again["data"][0]["embedding"] == values
    assert decoded(text) == values


def test_known_vector_is_encoded_byte_for_byte() -> None:
    values, text = KNOWN
    body = orjson.loads(
        normalize_embeddings(orjson.dumps(answer([values], 3)), ctx(encoding="base64")).body
    )
    assert body["data"][0]["embedding"] == text
    body = orjson.loads(normalize_embeddings(orjson.dumps(answer([text], 3)), ctx()).body)
    assert body["data"][0]["embedding"] == values


def test_a_double_is_rounded_to_float32_for_base64() -> None:
    body = orjson.loads(
        normalize_embeddings(orjson.dumps(answer([[0.1]], 1)), ctx(encoding="base64")).body
    )
    assert decoded(body["data"][0]["embedding"]) == float32([0.1]) != [0.1]


def test_integers_are_numbers() -> None:
    body = orjson.loads(normalize_embeddings(orjson.dumps(answer([[1, 0, -2]], 1)), ctx()).body)
    assert body["data"][0]["embedding"] == [1, 0, -2]
    body = orjson.loads(
        normalize_embeddings(orjson.dumps(answer([[1, 0, -2]], 1)), ctx(encoding="base64")).body
    )
    assert decoded(body["data"][0]["embedding"]) == [1.0, 0.0, -2.0]


# Order, extras, envelope.


def test_extras_are_dropped_and_the_data_put_in_order() -> None:
    raw = fixture("contract.openai.embeddings.extras.json")
    third = orjson.loads(raw)["data"][0]["embedding"]
    normalized = normalize_embeddings(raw, ctx(prompt=["a", "b", "c"]))
    assert canonical(normalized, "float") == answer([HELLO, GOODBYE, third], 12)
    assert normalized.fixes == {FIX_EXTRAS, FIX_USAGE}
    assert normalized.usage.source == "upstream"


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_items_in_any_order(encoding: str) -> None:
    upstream = {"data": [
        {"index": 1, "embedding": GOODBYE},
        {"index": 0, "embedding": HELLO_BASE64},
    ]}  # fmt: skip
    normalized = normalize_embeddings(orjson.dumps(upstream), ctx(encoding=encoding, prompt=TWO))
    body = canonical(normalized, encoding)
    vectors = [item["embedding"] for item in body["data"]]
    if encoding == "float":
        assert vectors == [float32(HELLO), GOODBYE]
    else:
        assert vectors == [HELLO_BASE64, GOODBYE_BASE64]
    assert normalized.fixes == {FIX_ENVELOPE, FIX_USAGE}  # no object fields, no usage


def test_an_item_without_index_is_taken_at_its_position() -> None:
    upstream = {"object": "list", "data": [{"embedding": [1.0]}, {"embedding": [2.0]}]}
    normalized = normalize_embeddings(orjson.dumps(upstream), ctx(prompt=["a", "b"]))
    assert [item["embedding"] for item in canonical(normalized, "float")["data"]] == [[1.0], [2.0]]
    assert FIX_ENVELOPE in normalized.fixes


def test_whole_answers_for_embeddings_go_to_this_normalizer() -> None:
    raw = fixture("contract.openai.embeddings.json")
    for family in API_FAMILIES.values():
        assert family.response(raw, ctx()).body == normalize_embeddings(raw, ctx()).body


# Usage.


@pytest.mark.parametrize(
    ("usage", "tokens", "fixed"),
    [
        ({"prompt_tokens": 7, "total_tokens": 7}, 7, False),
        ({"prompt_tokens": 7, "total_tokens": 9}, 7, True),  # embeddings have no completion
        ({"prompt_tokens": 7}, 7, True),
        ({"input_tokens": 7}, 7, True),
        ({"total_tokens": 7}, 7, True),
        ({"prompt_tokens": 7.0, "total_tokens": 7.0}, 7, False),
        ({"prompt_tokens": 7, "completion_tokens": 0, "total_tokens": 7}, 7, True),
        ({"prompt_tokens": [7], "total_tokens": 7}, 7, True),  # a count that is no number
        ({"prompt_tokens": 7, "total_tokens": {"n": 7}}, 7, True),
    ],
)
def test_upstream_usage(usage: dict[str, Any], tokens: int, fixed: bool) -> None:
    upstream = {**answer([[1.0]], 0), "usage": usage}
    normalized = normalize_embeddings(orjson.dumps(upstream), ctx())
    assert canonical(normalized, "float")["usage"] == {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
    }
    assert normalized.usage.source == "upstream"
    assert (FIX_USAGE in normalized.fixes) == fixed


@pytest.mark.parametrize(
    ("prompt", "tokens"),
    [
        ("Hi", 1),
        ("x" * 17, 5),  # about four characters a token, rounded up
        (["abcd", "efgh"], 2),
        ([1, 2, 3], 3),  # token ids are counted, not estimated
        ([[1, 2, 3], [4]], 4),
    ],
)
@pytest.mark.parametrize(
    "usage", [None, {}, {"prompt_tokens": -1}, {"prompt_tokens": True}, {"prompt_tokens": "7"}, 7]
)
def test_estimated_usage_is_marked(prompt: object, tokens: int, usage: object) -> None:
    count = 2 if isinstance(prompt, list) and not isinstance(prompt[0], int) else 1
    upstream: dict[str, Any] = {**answer([[1.0]] * count, 0), "usage": usage}
    normalized = normalize_embeddings(orjson.dumps(upstream), ctx(prompt=prompt))
    assert canonical(normalized, "float")["usage"] == {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
    }
    assert normalized.usage.source == "estimated"
    assert (normalized.usage.prompt_tokens, normalized.usage.total_tokens) == (tokens, tokens)
    assert FIX_USAGE in normalized.fixes


# What cannot be made canonical: a 502 that says why.

GOOD = answer([[0.5]], 1)["data"][0]
MALFORMED = [
    (b"not json", "not JSON"),
    (b"[1, 2]", "not an object"),
    (b"{}", "without any embedding"),
    (orjson.dumps({"data": []}), "without any embedding"),
    (orjson.dumps({"data": {"0": GOOD}}), "without any embedding"),
    (orjson.dumps({"data": [GOOD, GOOD]}), "embeddings (2) than the request has inputs (1)"),
    (orjson.dumps({"data": ["x"]}), "an embedding not an object"),
    (orjson.dumps({"data": [{**GOOD, "index": 1}]}), "embedding index 1 among 1"),
    (orjson.dumps({"data": [{**GOOD, "index": -1}]}), "embedding index -1 among 1"),
    (orjson.dumps({"data": [{**GOOD, "index": "0"}]}), "embedding index '0' among 1"),
    (orjson.dumps({"data": [{**GOOD, "index": True}]}), "embedding index True among 1"),
    (orjson.dumps({"data": [{**GOOD, "index": 0.0}]}), "embedding index 0.0 among 1"),
    (orjson.dumps({"data": [{"index": 0}]}), "embedding 0 with neither numbers nor base64"),
    (orjson.dumps({"data": [{"index": 0, "embedding": []}]}), "neither numbers nor base64"),
    (orjson.dumps({"data": [{"index": 0, "embedding": {"float": [1.0]}}]}), "neither numbers"),
    (
        orjson.dumps({"data": [{"index": 0, "embedding": [1.0, "2"]}]}),
        "a value that is not a number",
    ),
    (orjson.dumps({"data": [{"index": 0, "embedding": [1.0, None]}]}), "not a number"),
    (orjson.dumps({"data": [{"index": 0, "embedding": [True]}]}), "not a number"),
    (orjson.dumps({"data": [{"index": 0, "embedding": [[1.0]]}]}), "not a number"),
    (orjson.dumps({"data": [{"index": 0, "embedding": "%%%"}]}), "a string that is not base64"),
    (orjson.dumps({"data": [{"index": 0, "embedding": "AAAA AAA="}]}), "not base64"),
    (orjson.dumps({"data": [{"index": 0, "embedding": ""}]}), "base64 that is no float32 vector"),
    (orjson.dumps({"data": [{"index": 0, "embedding": "AAAA"}]}), "no float32 vector"),  # 3 bytes
    (orjson.dumps({"data": [{"index": 0, "embedding": "AADAfw=="}]}), "with NaN or inf"),
    (orjson.dumps({"data": [{"index": 0, "embedding": "AACA/w=="}]}), "with NaN or inf"),
]


@pytest.mark.parametrize("encoding", ["float", "base64"])
@pytest.mark.parametrize(("raw", "message"), MALFORMED)
def test_malformed_answer_is_502(raw: bytes, message: str, encoding: str) -> None:
    with pytest.raises(UpstreamProtocolError) as caught:
        normalize_embeddings(raw, ctx(encoding=encoding))
    assert message in str(caught.value)
    status, body = to_openai_error(caught.value)
    assert (status, body["error"]["type"]) == (502, "upstream_error")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}], "embedding 0 twice"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 2, "embedding": [2.0]}], "index 2 among 2"),
        ([{"embedding": [1.0]}, {"index": 0, "embedding": [2.0]}], "embedding 0 twice"),
        # Each input embedded in the same space, or the answer is broken (issue: lengths).
        ([{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [2.0, 3.0]}], "1 to 2"),
        ([{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1, "embedding": "AACAPw=="}], "1 to 2"),
    ],
)
def test_indices_must_number_the_inputs(data: list[Any], message: str) -> None:
    with pytest.raises(UpstreamProtocolError, match=message):
        normalize_embeddings(orjson.dumps({"data": data}), ctx(prompt=TWO))


@pytest.mark.parametrize(("prompt", "count"), [(TWO, 1), ("Hi", 2), ([[1], [2], [3]], 2)])
def test_as_many_vectors_as_inputs(prompt: object, count: int) -> None:
    upstream = answer([[1.0]] * count, 1)
    with pytest.raises(UpstreamProtocolError, match="another number of embeddings"):
        normalize_embeddings(orjson.dumps(upstream), ctx(prompt=prompt))


def test_beyond_float32_cannot_be_base64() -> None:
    upstream = orjson.dumps(answer([[1e39]], 1))
    assert orjson.loads(normalize_embeddings(upstream, ctx()).body)["data"][0]["embedding"] == [
        1e39
    ]
    with pytest.raises(UpstreamProtocolError, match="a value beyond float32"):
        normalize_embeddings(upstream, ctx(encoding="base64"))


@pytest.mark.parametrize(
    ("dialect", "raw", "status", "message"),
    [
        (
            "openai",
            b'{"error": {"message": "bad input", "type": "invalid_request_error"}}',
            502,
            "bad input",
        ),
        ("ollama", b'{"error": "model \\"x\\" not found"}', 502, 'model "x" not found'),
        (
            "gemini",
            b'{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}',
            429,
            "quota",
        ),
        (
            "vertex_google",
            b'{"error": {"code": 400, "message": "too long", "status": "INVALID_ARGUMENT"}}',
            400,
            "too long",
        ),
    ],
)
def test_an_error_object_is_the_upstreams_error(
    dialect: str, raw: bytes, status: int, message: str
) -> None:
    with pytest.raises(UpstreamError) as caught:
        normalize_embeddings(raw, ctx(dialect))
    code, body = to_openai_error(caught.value)
    assert (code, body["error"]["message"]) == (status, message)


@pytest.mark.parametrize(
    ("dialect", "raw"),
    [
        ("gemini", b'{"embeddings": "x"}'),
        ("gemini", b'{"embeddings": [{"value": [1.0]}]}'),
        ("gemini", b'{"embeddings": ["x"]}'),
        ("vertex_google", b'{"predictions": "x"}'),
        ("vertex_google", b'{"predictions": [{"embeddings": {"value": [1.0]}}]}'),
        ("vertex_google", b'{"predictions": [{"values": [1.0]}]}'),
        ("cohere", b'{"id": "x", "embeddings": {"int8": [[1]]}}'),
        ("cohere", b'{"id": "x"}'),
        ("ollama", b'{"model": "m", "embeddings": [[]]}'),
        ("ollama", b'{"model": "m"}'),
    ],
)
def test_a_native_answer_without_vectors_is_502(dialect: str, raw: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        normalize_embeddings(raw, ctx(dialect))


def test_cohere_counts_the_tokens_read_before_the_billed_ones() -> None:
    body = orjson.loads(fixture("contract.cohere.embed.json"))
    body["meta"]["tokens"] = {"input_tokens": 4}
    normalized = normalize_embeddings(orjson.dumps(body), ctx("cohere", prompt=TWO))
    assert (normalized.usage.prompt_tokens, normalized.usage.source) == (4, "upstream")


def test_cohere_floats_by_type_or_bare() -> None:
    bare = {"id": "x", "embeddings": [HELLO], "response_type": "embeddings_floats"}
    normalized = normalize_embeddings(orjson.dumps(bare), ctx("cohere"))
    assert orjson.loads(normalized.body)["data"][0]["embedding"] == HELLO
