"""A client's completion request: validated on the way in, rewritten on the way up (sans-IO).

docs/canonical-output.md section 5: ``model`` becomes the deployment's upstream name and every other
field passes through unchanged, unknown ones included; for a stream the proxy also asks the upstream
for usage (section 3), remembering whether the client itself asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from proxy.core.errors import InvalidRequest

# The OpenAI endpoints a request routed by model goes to upstream. A Responses API request is
# made a chat request (proxy.normalize.responses), unless its provider serves the Responses API
# itself: then its upstream endpoint is "responses".
Endpoint = Literal["chat", "completions", "embeddings", "responses"]


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class ClientRequest:
    endpoint: Endpoint
    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool  # the client asked for usage in its stream
    max_tokens: int | None
    n: int
    prompt: object  # the messages or the prompt, measured only for a usage estimate
    # The client's body in bytes: everything that goes upstream with the prompt (tools,
    # schemas, instructions) is prompt too, so its size bounds the prompt's reservation.
    size: int
    # The most chat choices relayed (0: no bound): the n the client set, else CHOICES_MAX.
    choices: int = 0
    # Embeddings: the encoding_format the client asked for, whatever the upstream sends.
    encoding: str = "float"


def _wrong_type(param: str, expected: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}", param=param, code="invalid_type"
    )


def _optional_int(body: dict[str, Any], param: str, minimum: int) -> int | None:
    value = body.get(param)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong_type(param, "an integer")
    if value < minimum:
        raise InvalidRequest(
            f"Invalid value for '{param}': must be at least {minimum}",
            param=param,
            code="invalid_value",
        )
    return value


# Nineteen digits in a row: perhaps an integer beyond 64 bits (below -2**63 or from 2**64 on),
# which orjson reads as a float and would send upstream so; only then is the body read once
# more, to tell (``_check_integers``). Found by two passes in C (every digit made a 9, then a
# search), many times quicker than a regular expression tried at every byte.
_DIGITS_AS_NINES: Final = bytes(0x39 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_DIGITS: Final = b"9" * 19
_INT_RANGE: Final = range(-(2**63), 2**64)
# The most chat choices relayed to a client that did not set n.
CHOICES_MAX: Final = 128
# Embeddings: the encodings a client may ask for, and OpenAI's limit of inputs in one request.
ENCODINGS: Final = frozenset({"float", "base64"})
EMBEDDING_INPUTS_MAX: Final = 2048


def _check_integers(raw: bytes) -> None:
    """Refuse an integer that JSON's readers here cannot keep exact: changing a client's
    value (a seed, say) on the way would be worse than refusing it."""

    def read_int(text: str) -> int:
        value = int(text)
        if value not in _INT_RANGE:
            raise ValueError(text)
        return value

    try:
        json.loads(raw, parse_int=read_int)
    except ValueError:
        raise InvalidRequest(
            "The request body holds an integer beyond 64 bits, which cannot be passed on exactly",
            code="invalid_json",
        ) from None


def read_object(raw: bytes) -> dict[str, Any]:
    """A request body: one JSON object whose integers are all kept exact, or InvalidRequest."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"The request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    if _LONG_DIGITS in raw.translate(_DIGITS_AS_NINES):
        _check_integers(raw)
    return body


def parse_request(raw: bytes, endpoint: Endpoint, *, model: str | None = None) -> ClientRequest:
    """The validated request, or ``InvalidRequest`` naming the offending parameter.

    ``model``: the model the request's URL names (Azure's deployment paths), which wins over
    the body's and makes it optional there."""
    body = read_object(raw)

    if model is not None:
        body["model"] = model
    model = body.get("model")
    if model is None:
        raise InvalidRequest(
            "Missing required parameter: 'model'", param="model", code="missing_required_parameter"
        )
    if not isinstance(model, str) or not model:
        raise _wrong_type("model", "a non-empty string")

    if endpoint == "embeddings":
        return _embeddings_request(body, model, len(raw))
    if endpoint == "chat":
        messages = body.get("messages")
        if messages is None:
            raise InvalidRequest(
                "Missing required parameter: 'messages'",
                param="messages",
                code="missing_required_parameter",
            )
        if not isinstance(messages, list) or not messages:
            raise _wrong_type("messages", "a non-empty array")
        if not all(isinstance(message, dict) for message in messages):
            raise _wrong_type("messages", "an array of objects")
        prompt: object = messages
    else:
        prompt = body.get("prompt")
        if prompt is None:
            raise InvalidRequest(
                "Missing required parameter: 'prompt'",
                param="prompt",
                code="missing_required_parameter",
            )
        if not isinstance(prompt, str | list):
            raise _wrong_type("prompt", "a string or an array")

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _wrong_type("stream", "a boolean")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _wrong_type("stream_options", "an object")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise _wrong_type("stream_options.include_usage", "a boolean")

    # OpenAI refuses a chat completion of 0 tokens; its legacy completions take max_tokens 0
    # (the prompt's logprobs alone, with echo), reserved at the model's ceiling all the same.
    least = 1 if endpoint == "chat" else 0
    max_tokens = _optional_int(body, "max_completion_tokens", least)
    legacy = _optional_int(body, "max_tokens", least)
    if max_tokens is None:
        max_tokens = legacy
    n = _optional_int(body, "n", 1) or 1
    # A client that set n gets that many chat choices, and no more; one that did not may get
    # more than one, as the upstream's default n brings (never merged), up to a bound.
    choices = (n if "n" in body else CHOICES_MAX) if endpoint == "chat" else 0
    include_usage = include_usage and stream
    return ClientRequest(
        endpoint, body, model, stream, include_usage, max_tokens, n, prompt, len(raw), choices
    )


def _embeddings_request(body: dict[str, Any], model: str, size: int) -> ClientRequest:
    """An embeddings request (CreateEmbeddingRequest): it never streams, and its input is the
    prompt measured for a usage estimate."""
    value = body.get("input")
    if value is None:
        raise InvalidRequest(
            "Missing required parameter: 'input'", param="input", code="missing_required_parameter"
        )
    _check_input(value)
    encoding = body.get("encoding_format")
    if encoding is None:
        encoding = "float"
    elif not isinstance(encoding, str):
        raise _wrong_type("encoding_format", "a string")
    elif encoding not in ENCODINGS:
        raise InvalidRequest(
            "Invalid value for 'encoding_format': must be 'float' or 'base64'",
            param="encoding_format",
            code="invalid_value",
        )
    _optional_int(body, "dimensions", 1)
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise _wrong_type("user", "a string")
    return ClientRequest(
        "embeddings", body, model, False, False, None, 1, value, size, encoding=encoding
    )


def _check_input(value: object) -> None:
    """``input`` as OpenAI takes it: a string, or up to 2048 strings, token ids or arrays of
    token ids; nothing empty, as OpenAI refuses an empty string."""
    expected = "a string, an array of strings, of token ids or of arrays of token ids"
    if isinstance(value, str):
        if not value:
            raise _empty_input("input")
        return
    if not isinstance(value, list):
        raise _wrong_type("input", expected)
    if not value:
        raise _empty_input("input")
    if len(value) > EMBEDDING_INPUTS_MAX:
        raise InvalidRequest(
            f"Invalid value for 'input': at most {EMBEDDING_INPUTS_MAX} inputs in one request",
            param="input",
            code="invalid_value",
        )
    first = value[0]
    if isinstance(first, str):
        for position, item in enumerate(value):
            if not isinstance(item, str):
                raise _wrong_type(f"input[{position}]", "a string, as the first one is")
            if not item:
                raise _empty_input(f"input[{position}]")
    elif isinstance(first, list):
        for position, item in enumerate(value):
            if not isinstance(item, list) or not _token_ids(item):
                raise _wrong_type(f"input[{position}]", "a non-empty array of token ids")
    elif not _token_ids(value):
        raise _wrong_type("input", expected)


def _token_ids(value: list[Any]) -> bool:
    # Exact types: JSON's true is no token id, and bool is an int subclass.
    return bool(value) and all(type(item) is int and item >= 0 for item in value)


def _empty_input(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid value for '{param}': it may not be empty", param=param, code="invalid_value"
    )


def embedding_inputs(value: object) -> list[str] | list[list[int]]:
    """An embeddings request's inputs, one per vector it is answered with: a string or one
    array of token ids is one input. Empty for what ``parse_request`` would have refused."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        return []
    if all(isinstance(item, str) for item in value):
        return value
    if all(isinstance(item, list) for item in value):
        return value
    return [value]


def upstream_body(request: ClientRequest, upstream_model: str, *, ask_usage: bool) -> bytes:
    """The JSON body for the upstream: the client's, with the upstream model name.

    ``ask_usage``: add ``stream_options.include_usage`` so that a streamed answer carries its
    counts; a provider setting turns it off for upstreams that reject the field.
    """
    body = dict(request.body)
    body["model"] = upstream_model
    if request.stream and ask_usage:
        options = body.get("stream_options")
        body["stream_options"] = (
            {**options, "include_usage": True} if options else {"include_usage": True}
        )
    return encode_body(body)


def encode_body(body: dict[str, Any]) -> bytes:
    """A request body for the upstream, as JSON."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        # orjson writes less deep a document than it reads.
        raise InvalidRequest(
            "The request body is nested too deeply to be passed on", code="invalid_json"
        ) from None
