"""Checks of the test data itself: tests/support/schema.py and the golden files in tests/golden/.

The golden files say what a client must receive for each provider fixture; they were written
by reading the fixtures (see tests/golden/README.md). These tests check their format, that they
agree with the fixture bytes where that is cheap to check, and that every fixture is either
golden or listed as native.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

try:
    from schema import EXTENSION_KEY, validate, validate_completion_chunk
except ImportError:  # tests/ imported as a package
    from tests.support.schema import EXTENSION_KEY, validate, validate_completion_chunk

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "fixtures" / "providers"
GOLDEN = HERE / "golden"
GOLDEN_README = GOLDEN / "README.md"

TOP_KEYS = [
    "fixture",
    "endpoint",
    "stream",
    "dialect",
    "outcome",
    "error",
    "id",
    "created",
    "system_fingerprint",
    "service_tier",
    "choices",
    "usage",
]
CHOICE_KEYS = ["content", "reasoning_content", "refusal", "tool_calls", "finish_reason"]
TOOL_CALL_KEYS = ["id", "name", "arguments"]
USAGE_KEYS = [
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "reasoning_tokens",
]
FINISH_REASONS = {
    "chat": {"stop", "length", "tool_calls", "content_filter", "function_call"},
    "completions": {"stop", "length", "content_filter"},
}
DIALECTS = {
    "openai",
    "friendli-2024",
    "maritaca-inference",
    "anthropic",
    "gemini",
    "cohere",
    "ollama",
    "tgi",
    "bedrock",
    "vertex_google",
    "vertex_anthropic",
}
# A native API's fixtures, by their names' start (SOURCES.md: "Names follow ..."), and its dialect.
NATIVE_PREFIXES = (
    ("anthropic.", "anthropic"),
    ("gemini.", "gemini"),
    ("cohere.", "cohere"),
    ("ollama.api-chat.", "ollama"),
    ("tgi.generate", "tgi"),
    ("bedrock.", "bedrock"),
    ("vertex-gemini.", "vertex_google"),
    ("vertex-claude.", "vertex_anthropic"),
    # Google's error envelope, whichever publisher's model it answers for.
    ("vertex.error.", "vertex_google"),
)
# Plausible Unix seconds: 2000-01-01 .. 2100-01-01.
EPOCH_RANGE = (946_684_800, 4_102_444_800)

GOLDEN_FILES = sorted(GOLDEN.glob("*.json"))
# Our own fixtures (tests/fixtures/contract), with their goldens in tests/golden/contract.
CONTRACT = HERE / "fixtures" / "contract"
CONTRACT_GOLDEN_FILES = sorted((GOLDEN / "contract").glob("*.json"))
CONTRACT_FILES = sorted(p for p in CONTRACT.iterdir() if p.is_file() and p.suffix != ".md")
ALL_GOLDEN_FILES = GOLDEN_FILES + CONTRACT_GOLDEN_FILES


def _fixtures_of(path: Path) -> Path:
    return CONTRACT if path.parent.name == "contract" else FIXTURES


FIXTURE_FILES = sorted(p for p in FIXTURES.iterdir() if p.is_file() and p.name != "SOURCES.md")


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.name}: not a JSON object"
    return data


def _sse_payloads(path: Path) -> list[dict[str, Any]]:
    """The JSON payloads of a plain LF-framed OpenAI stream (one `data:` line per event)."""
    payloads = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            payloads.append(json.loads(line[len("data: ") :]))
    return payloads


def _is_text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# =========================================================================== schema.py


def _chat_chunk() -> dict[str, Any]:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1727346171,
        "model": "gpt-4o",
        "system_fingerprint": "fp_7568d46099",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": "Hi", "refusal": None},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }


def _usage_chunk() -> dict[str, Any]:
    chunk = _chat_chunk()
    chunk["choices"] = []
    chunk["usage"] = {
        "prompt_tokens": 9,
        "completion_tokens": 2,
        "total_tokens": 11,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    return chunk


def _tool_chunk() -> dict[str, Any]:
    chunk = _chat_chunk()
    chunk["choices"][0]["delta"] = {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ]
    }
    return chunk


def _chat_response() -> dict[str, Any]:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": 1727346171,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{}"},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    }


def _completion_chunk() -> dict[str, Any]:
    return {
        "id": "cmpl-123",
        "object": "text_completion",
        "created": 1770934485,
        "model": "gpt-3.5-turbo-instruct",
        "choices": [{"index": 0, "text": " such", "logprobs": None, "finish_reason": None}],
    }


def _error_body() -> dict[str, Any]:
    return {"error": {"message": "boom", "type": "upstream_error", "param": None, "code": None}}


def test_canonical_objects_pass() -> None:
    validate(_chat_chunk(), "CreateChatCompletionStreamResponse")
    validate(_usage_chunk(), "CreateChatCompletionStreamResponse")
    validate(_tool_chunk(), "CreateChatCompletionStreamResponse")
    validate(_chat_response(), "CreateChatCompletionResponse")
    validate(_error_body(), "ErrorResponse")
    validate_completion_chunk(_completion_chunk())


@pytest.mark.parametrize(
    "name",
    [
        "openai.chat.stream.length.sse",
        "openai.chat.stream.logprobs.sse",
        "openai.chat.stream.n3.sse",
        "openai.chat.stream.refusal.sse",
        "openai.chat.stream.sse",
        "openai.chat.stream.tool-calls.sse",
    ],
)
def test_real_openai_chunks_pass(name: str) -> None:
    payloads = _sse_payloads(FIXTURES / name)
    assert payloads
    for payload in payloads:
        validate(payload, "CreateChatCompletionStreamResponse")


def test_real_openai_bodies_pass() -> None:
    validate(_load(FIXTURES / "openai.chat.json"), "CreateChatCompletionResponse")
    validate(_load(FIXTURES / "openai.completions.json"), "CreateCompletionResponse")
    validate(_load(FIXTURES / "openai.error.json"), "ErrorResponse")
    for payload in _sse_payloads(FIXTURES / "openai.completions.stream.sse"):
        if payload.get("usage") is None:
            payload.pop("usage", None)  # OpenAI sends usage:null, which the schema forbids
        validate_completion_chunk(payload)


STREAM = "CreateChatCompletionStreamResponse"
RESPONSE = "CreateChatCompletionResponse"


def _set(obj: dict[str, Any], json_path: str, value: object) -> None:
    """Set the member at a simple JSON path (``$.a[0].b``), creating only the last key."""
    segments = re.findall(r"\.(\w+)|\[(\d+)\]", json_path)
    node: Any = obj
    for key, index in segments[:-1]:
        node = node[int(index)] if index else node[key]
    key, index = segments[-1]
    node[int(index) if index else key] = value


EXTRA_KEY_CASES = [
    # (factory, schema name, JSON path of the added key)
    (_chat_chunk, STREAM, "$.x_groq"),
    (_chat_chunk, STREAM, "$.token"),
    (_chat_chunk, STREAM, "$.prompt_filter_results"),
    (_chat_chunk, STREAM, "$.choices[0].stop_reason"),
    (_chat_chunk, STREAM, "$.choices[0].matched_stop"),
    (_chat_chunk, STREAM, "$.choices[0].delta.reasoning"),
    (_chat_chunk, STREAM, "$.choices[0].delta.token_id"),
    (_usage_chunk, STREAM, "$.usage.cost"),
    (_usage_chunk, STREAM, "$.usage.prompt_cache_hit_tokens"),
    (_usage_chunk, STREAM, "$.usage.prompt_tokens_details.foo"),
    (_tool_chunk, STREAM, "$.choices[0].delta.tool_calls[0].function.parsed"),
    (_chat_response, RESPONSE, "$.choices[0].message.reasoning"),
    (_chat_response, RESPONSE, "$.choices[0].native_finish_reason"),
    # message.tool_calls items are a oneOf (function / custom call): the matching branch counts.
    (_chat_response, RESPONSE, "$.choices[0].message.tool_calls[0].index"),
    (_chat_response, RESPONSE, "$.usage.estimated_cost"),
    (_chat_response, RESPONSE, "$.citations"),
    (_error_body, "ErrorResponse", "$.error.metadata"),
]


@pytest.mark.parametrize(
    ("factory", "name", "json_path"), EXTRA_KEY_CASES, ids=[case[2] for case in EXTRA_KEY_CASES]
)
def test_extra_key_fails_at_its_path(factory: Any, name: str, json_path: str) -> None:
    obj = factory()
    validate(obj, name)
    _set(obj, json_path, 1)
    key = re.split(r"[.\]]", json_path)[-1]
    with pytest.raises(AssertionError) as info:
        validate(obj, name)
    message = str(info.value)
    assert message.startswith(f"{json_path}:"), message
    assert repr(key) in message, message


def test_extra_key_on_completion_choice_fails() -> None:
    chunk = _completion_chunk()
    chunk["choices"][0]["token"] = 1778  # Friendli's sampled token id
    with pytest.raises(AssertionError, match=r"^\$\.choices\[0\]\.token: .*'token'"):
        validate_completion_chunk(chunk)


def test_reasoning_content_allowed_on_delta_and_message() -> None:
    chunk = _chat_chunk()
    chunk["choices"][0]["delta"][EXTENSION_KEY] = "thinking..."
    validate(chunk, "CreateChatCompletionStreamResponse")
    response = _chat_response()
    response["choices"][0]["message"][EXTENSION_KEY] = "thinking..."
    validate(response, "CreateChatCompletionResponse")


@pytest.mark.parametrize(
    ("factory", "name", "json_path"),
    [
        (_chat_chunk, STREAM, "$.reasoning_content"),
        (_chat_chunk, STREAM, "$.choices[0].reasoning_content"),
        (_usage_chunk, STREAM, "$.usage.reasoning_content"),
        (_tool_chunk, STREAM, "$.choices[0].delta.tool_calls[0].reasoning_content"),
        (_chat_response, RESPONSE, "$.choices[0].reasoning_content"),
        (_chat_response, RESPONSE, "$.choices[0].message.tool_calls[0].function.reasoning_content"),
        (_error_body, "ErrorResponse", "$.error.reasoning_content"),
    ],
)
def test_reasoning_content_rejected_elsewhere(factory: Any, name: str, json_path: str) -> None:
    obj = factory()
    _set(obj, json_path, "thinking...")
    with pytest.raises(AssertionError) as info:
        validate(obj, name)
    assert str(info.value).startswith(f"{json_path}:"), str(info.value)


def test_reasoning_content_rejected_on_completion_choice() -> None:
    chunk = _completion_chunk()
    chunk["choices"][0][EXTENSION_KEY] = "thinking..."
    with pytest.raises(AssertionError, match=r"^\$\.choices\[0\]\.reasoning_content:"):
        validate_completion_chunk(chunk)


@pytest.mark.parametrize("value", [None, 3, ["a"]])
def test_reasoning_content_must_be_a_string(value: object) -> None:
    chunk = _chat_chunk()
    chunk["choices"][0]["delta"][EXTENSION_KEY] = value
    with pytest.raises(AssertionError, match=r"^\$\.choices\[0\]\.delta\.reasoning_content:"):
        validate(chunk, "CreateChatCompletionStreamResponse")


def test_completion_chunk_allows_null_finish_reason_only_as_a_chunk() -> None:
    chunk = _completion_chunk()
    validate_completion_chunk(chunk)
    with pytest.raises(AssertionError, match=r"^\$\.choices\[0\]\.finish_reason:"):
        validate(chunk, "CreateCompletionResponse")
    chunk["choices"][0]["finish_reason"] = "length"
    validate(chunk, "CreateCompletionResponse")
    chunk["choices"][0]["finish_reason"] = "tool_calls"
    with pytest.raises(AssertionError, match=r"^\$\.choices\[0\]\.finish_reason:"):
        validate_completion_chunk(chunk)


def test_additional_properties_schema_allows_its_keys() -> None:
    chunk = _completion_chunk()
    chunk["choices"][0]["logprobs"] = {
        "tokens": [" such"],
        "token_logprobs": [-0.1],
        "top_logprobs": [{" such": -0.1, " as": -2.5}],
        "text_offset": [0],
    }
    validate_completion_chunk(chunk)
    chunk["choices"][0]["logprobs"]["extra"] = []
    with pytest.raises(AssertionError, match=r"^\$\.choices\[0\]\.logprobs\.extra:"):
        validate_completion_chunk(chunk)


@pytest.mark.parametrize(
    ("json_path", "value"),
    [
        ("$.created", 1746852567.742961),
        ("$.object", "chat.completion.done"),
        ("$.choices[0].finish_reason", "eos"),
        ("$.choices[0].delta.content", [{"type": "text", "text": "Hi"}]),
    ],
)
def test_schema_violations_fail_at_their_path(json_path: str, value: object) -> None:
    chunk = _chat_chunk()
    _set(chunk, json_path, value)
    with pytest.raises(AssertionError) as info:
        validate(chunk, STREAM)
    assert str(info.value).startswith(f"{json_path}:"), str(info.value)


def test_missing_required_key_fails() -> None:
    chunk = _chat_chunk()
    del chunk["model"]
    with pytest.raises(AssertionError, match="'model' is a required property"):
        validate(chunk, "CreateChatCompletionStreamResponse")


def test_unknown_schema_name() -> None:
    with pytest.raises(KeyError):
        validate({}, "NoSuchSchema")


def test_validate_does_not_modify_its_input() -> None:
    chunk = _tool_chunk()
    before = copy.deepcopy(chunk)
    validate(chunk, "CreateChatCompletionStreamResponse")
    assert chunk == before


# =========================================================================== golden files


def test_there_are_golden_files() -> None:
    assert len(GOLDEN_FILES) >= 70
    assert FIXTURE_FILES


@pytest.mark.parametrize("path", ALL_GOLDEN_FILES, ids=[p.name for p in ALL_GOLDEN_FILES])
def test_golden_file_format(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    golden = _load(path)
    keys = list(golden)
    # "n": the n the client asks for, where an upstream sends more choices than that.
    allowed = [[*TOP_KEYS, *n, *notes] for n in ([], ["n"]) for notes in ([], ["notes"])]
    assert keys in allowed, f"keys {keys}"
    if "n" in golden:
        assert _is_int(golden["n"]) and 1 <= golden["n"] <= len(golden["choices"])
    assert text == json.dumps(golden, indent=2, ensure_ascii=False) + "\n", "not 2-space JSON"
    if "notes" in golden:
        assert _is_text(golden["notes"])

    fixture = golden["fixture"]
    assert path.name == f"{fixture}.json"
    fixture_path = _fixtures_of(path) / fixture
    assert fixture_path.is_file(), f"no fixture {fixture}"

    endpoint = golden["endpoint"]
    assert endpoint in FINISH_REASONS
    completions = ".completions." in fixture or fixture.startswith("tgi.generate")
    assert endpoint == ("completions" if completions else "chat")
    streamed = (
        fixture_path.suffix in (".sse", ".ndjson", ".eventstream")
        or ".stream.json-array." in fixture
    )
    assert golden["stream"] is (streamed or fixture.startswith("sse-quirks."))
    assert golden["dialect"] in DIALECTS
    own = fixture.removeprefix("contract.")  # our own fixtures name the API after the prefix
    native = next((n for prefix, n in NATIVE_PREFIXES if own.startswith(prefix)), None)
    if native is not None:
        assert golden["dialect"] == native
    elif fixture.startswith("friendli.") and "legacy-2024-11" in fixture:
        assert golden["dialect"] == "friendli-2024"
    elif fixture.startswith("maritaca.chat-inference.") and path.parent == GOLDEN:
        assert golden["dialect"] == "maritaca-inference"
    else:
        assert golden["dialect"] == "openai"

    outcome, error = golden["outcome"], golden["error"]
    assert outcome in ("ok", "error")
    if outcome == "ok":
        assert error is None
    else:
        assert isinstance(error, dict)
        assert list(error) == ["type", "message"]
        assert _is_text(error["type"])
        assert error["message"] is None or _is_text(error["message"])

    assert golden["id"] is None or _is_text(golden["id"])
    created = golden["created"]
    assert created is None or (_is_int(created) and EPOCH_RANGE[0] <= created < EPOCH_RANGE[1])
    assert golden["system_fingerprint"] is None or _is_text(golden["system_fingerprint"])
    # OpenAI's values only (the schema's enum), and only where the schema has the field.
    assert golden["service_tier"] in (None, "auto", "default", "flex", "scale", "priority")
    assert golden["service_tier"] is None or endpoint == "chat"

    choices = golden["choices"]
    assert isinstance(choices, dict)
    assert list(choices) == [str(i) for i in range(len(choices))], "choice keys must be 0..n-1"
    if outcome == "ok":
        assert choices, "an ok outcome has at least one choice"
    for index, choice in choices.items():
        where = f"choices[{index}]"
        assert list(choice) == CHOICE_KEYS, where
        for field in ("content", "reasoning_content", "refusal"):
            # null when there is no text at all (or only empty strings)
            assert choice[field] is None or _is_text(choice[field]), f"{where}.{field}"
        assert isinstance(choice["tool_calls"], list), where
        for call in choice["tool_calls"]:
            assert isinstance(call, dict)
            assert list(call) == TOOL_CALL_KEYS, where
            assert call["id"] is None or _is_text(call["id"]), where
            assert _is_text(call["name"]), where
            assert isinstance(call["arguments"], str), where
        finish = choice["finish_reason"]
        if outcome == "ok":
            assert finish in FINISH_REASONS[endpoint], f"{where}.finish_reason {finish!r}"
        else:
            assert finish is None or finish in FINISH_REASONS[endpoint], where
        if endpoint == "completions":
            assert choice["reasoning_content"] is None and choice["refusal"] is None, where
            assert choice["tool_calls"] == [], where

    usage = golden["usage"]
    if usage is not None:
        assert isinstance(usage, dict)
        assert list(usage) == USAGE_KEYS
        for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
            assert _is_int(usage[field]) and usage[field] >= 0, field
        for field in ("cached_tokens", "reasoning_tokens"):
            assert usage[field] is None or (_is_int(usage[field]) and usage[field] >= 0), field
        # completion_tokens includes reasoning tokens (OpenAI's convention)
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        if usage["reasoning_tokens"] is not None:
            assert usage["reasoning_tokens"] <= usage["completion_tokens"]
        if usage["cached_tokens"] is not None:
            assert usage["cached_tokens"] <= usage["prompt_tokens"]


@pytest.mark.parametrize("path", ALL_GOLDEN_FILES, ids=[p.name for p in ALL_GOLDEN_FILES])
def test_golden_values_occur_in_the_fixture(path: Path) -> None:
    """Strings that pass through unchanged must appear in the fixture's bytes."""
    golden = _load(path)
    # Bedrock's streams are binary frames: their JSON payloads are still text.
    raw = (_fixtures_of(path) / golden["fixture"]).read_bytes().decode("utf-8", "replace")
    expected: list[str] = []
    for field in ("id", "system_fingerprint", "service_tier"):
        if golden[field] is not None:
            expected.append(golden[field])
    if golden["error"] is not None and golden["error"]["message"] is not None:
        expected.append(golden["error"]["message"])
    for choice in golden["choices"].values():
        for call in choice["tool_calls"]:
            expected.append(call["name"])
            if call["id"] is not None:
                expected.append(call["id"])
    for value in expected:
        assert json.dumps(value)[1:-1] in raw or value in raw, f"{value!r} not in fixture"


def _readme_sections() -> tuple[list[str], list[str], list[tuple[str, ...]]]:
    text = GOLDEN_README.read_text(encoding="utf-8")
    golden_part = text.split("### Golden", 1)[1].split("### Native", 1)[0]
    native_part = text.split("### Native", 1)[1]
    rows = [
        tuple(cell.strip().strip("`") for cell in line.strip("|").split("|"))
        for line in golden_part.splitlines()
        if line.startswith("| `")
    ]
    golden = [row[0] for row in rows]
    native = re.findall(r"^- `([^`]+)`", native_part, flags=re.MULTILINE)
    return golden, native, rows


def test_every_fixture_is_golden_or_native() -> None:
    golden_listed, native_listed, _ = _readme_sections()
    golden_files = {path.name.removesuffix(".json") for path in GOLDEN_FILES}
    fixtures = {path.name for path in FIXTURE_FILES}

    assert len(golden_listed) == len(set(golden_listed)), "duplicate golden entry in README"
    assert len(native_listed) == len(set(native_listed)), "duplicate native entry in README"
    assert set(golden_listed) == golden_files, "README golden table != golden files"
    assert not set(native_listed) & golden_files, "a native fixture has a golden file"
    assert set(native_listed) <= fixtures, "README lists a native fixture that does not exist"
    assert golden_files <= fixtures, "golden file for a missing fixture"
    missing = fixtures - golden_files - set(native_listed)
    assert not missing, f"fixtures neither golden nor native: {sorted(missing)}"


def test_readme_table_matches_golden_files() -> None:
    _, _, rows = _readme_sections()
    for fixture, endpoint, mode, dialect, outcome in rows:
        golden = _load(GOLDEN / f"{fixture}.json")
        assert (endpoint, mode, dialect, outcome) == (
            golden["endpoint"],
            "stream" if golden["stream"] else "body",
            golden["dialect"],
            golden["outcome"],
        ), fixture


def test_native_fixtures_are_native() -> None:
    _, native_listed, _ = _readme_sections()
    native_prefixes = (
        "anthropic.messages",
        "anthropic.error",
        "gemini.",
        "cohere.",
        "ollama.api-chat.",
        "tgi.generate-stream.",
        "together.inference.",
    )
    for name in native_listed:
        assert name.startswith(native_prefixes), f"{name} is not a native-API fixture"


def test_every_contract_fixture_is_golden_and_described() -> None:
    """Our own fixtures: each has a golden and a paragraph in their README, and none shares a
    name with a shared one (the emulator serves both from one folder, by name)."""
    readme = (CONTRACT / "README.md").read_text(encoding="utf-8")
    described = set(re.findall(r"^- `([^`]+)`", readme, flags=re.MULTILINE))
    fixtures = {path.name for path in CONTRACT_FILES}
    golden = {path.name.removesuffix(".json") for path in CONTRACT_GOLDEN_FILES}
    assert fixtures == golden == described
    assert not fixtures & {path.name for path in FIXTURE_FILES}
