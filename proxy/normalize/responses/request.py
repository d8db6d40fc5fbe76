"""A Responses API request made the chat completions request that answers it (sans-IO).

The proxy keeps no responses, conversations or prompts: whatever needs one is refused with a
400 that says so (``refuse_stateful``), and ``store`` is accepted without effect. Clients that
send the whole transcript every turn (Codex, the Agents SDK with ``store: false``) need
nothing else. Fields that are not the Responses API's pass on to the chat request unchanged, as
they would for a chat client (docs/canonical-output.md section 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.errors import InvalidRequest
from proxy.normalize.responses import params
from proxy.normalize.responses.echo import Echo
from proxy.normalize.responses.messages import chat_messages
from proxy.normalize.responses.params import unsupported, wrong_type
from proxy.normalize.responses.tools import chat_tool_choice, chat_tools

# CreateResponse's properties: these are translated, echoed, accepted without effect or
# refused here, never passed on as they are.
_RESPONSES_FIELDS: Final = frozenset(
    {
        "background",
        "context_management",
        "conversation",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    }
)
_STATELESS: Final = "the proxy keeps no responses (it is stateless)"
_WHOLE_INPUT: Final = "Send the whole conversation as input instead, as store: false clients do."
# What the proxy cannot serve, with why: each needs something OpenAI keeps or runs itself.
_UNSERVED: Final = {
    "prompt": "prompt (a stored prompt template) cannot be used: the proxy has no stored "
    "prompts. Send the instructions and input themselves.",
    "context_management": "context_management cannot be used: the proxy does not compact "
    "conversations. Send the input you want the model to see.",
    "moderation": "moderation cannot be used: the proxy runs no moderation model.",
}
_EFFORTS: Final = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
_SUMMARIES: Final = ("auto", "concise", "detailed")
_TIERS: Final = ("auto", "default", "flex", "scale", "priority", "fast", "ultrafast")


def refuse_stateful(body: dict[str, Any]) -> None:
    """Raise ``InvalidRequest`` for what needs a response or conversation stored."""
    if body.get("previous_response_id") is not None:
        raise unsupported(
            "previous_response_id",
            f"previous_response_id cannot be used: {_STATELESS}. {_WHOLE_INPUT}",
        )
    if body.get("conversation") is not None:
        raise unsupported(
            "conversation",
            f"conversation cannot be used: the proxy keeps no conversations (it is stateless). "
            f"{_WHOLE_INPUT}",
        )
    if params.flag(body.get("background"), "background"):
        raise unsupported(
            "background",
            f"background: true cannot be used: {_STATELESS}, so none could be polled. "
            "Stream the response instead (stream: true).",
        )


# The chat parameters ``chat_body`` makes of a Responses request's own, by the name the
# Responses client gave them (longest first: a prefix names a part of one), so that a refusal
# of the chat request names what that client sent (``call.as_responses_refusal``). Kept
# beside the translation that makes them.
CLIENT_NAMES: Final = (
    ("response_format.json_schema.", "text.format."),
    ("response_format", "text.format"),
    ("max_completion_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning.effort"),
    ("verbosity", "text.verbosity"),
)

# Chat request fields the translation writes itself, or that a Response cannot show.
_CHAT_ONLY: Final = (
    "messages",
    "n",
    "logprobs",
    "max_tokens",
    "max_completion_tokens",
    "response_format",
    "reasoning_effort",
    "functions",
    "function_call",
)


def chat_body(body: dict[str, Any]) -> tuple[dict[str, Any], Echo]:
    """The chat completions request for the Responses request ``body``, and what its Response
    echoes; ``InvalidRequest`` (naming the parameter) for what is wrong or cannot be served."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    _refuse_unserved(body)
    model = params.text(body.get("model"), "model", required=True)
    if not model:
        raise wrong_type("model", "a non-empty string")
    instructions = params.text(body.get("instructions"), "instructions")
    messages = chat_messages(instructions, body.get("input"))
    if not messages:
        raise params.missing("input")
    for field in _CHAT_ONLY:
        if body.get(field) is not None:
            # Chat's own spelling of what the Responses API says its own way (or cannot say:
            # n > 1, one Response has one output): passed on, it would change the answer.
            raise unsupported(field, f"'{field}' is not a Responses API parameter")
    chat: dict[str, Any] = {k: v for k, v in body.items() if k not in _RESPONSES_FIELDS}
    chat["model"] = model
    chat["messages"] = messages
    tools = _add_tools(chat, body)
    settings = _settings(body)
    if settings.response_format is not None:
        chat["response_format"] = settings.response_format
    chat.update(settings.chat_fields())
    if params.flag(body.get("stream"), "stream"):
        chat["stream"] = True
        # The Response's usage needs the counts, whatever the client asked of its stream.
        chat["stream_options"] = {"include_usage": True}
    params.mapping(body.get("stream_options"), "stream_options")  # only include_obfuscation
    params.mapping(body.get("prompt_cache_options"), "prompt_cache_options")  # a cache hint
    # Accepted without effect (the proxy keeps no responses), as long as it is a boolean; the
    # Response schema has no store property to show it in.
    params.flag(body.get("store"), "store")
    return chat, _echo(body, instructions, tools, settings)


def _refuse_unserved(body: dict[str, Any]) -> None:
    """Raise ``InvalidRequest`` for what the proxy cannot serve at all."""
    refuse_stateful(body)
    for field, message in _UNSERVED.items():
        if body.get(field) is not None:
            raise unsupported(field, message)
    _refuse_logprobs(body)


@dataclass(slots=True)
class _Tools:
    """The request's tools as its Response shows them."""

    tools: tuple[dict[str, Any], ...]
    choice: str | dict[str, Any]
    parallel: bool | None


def _add_tools(chat: dict[str, Any], body: dict[str, Any]) -> _Tools:
    """Put the request's tools in ``chat``, in chat's shape; what the Response shows of them."""
    tools, echo_tools = chat_tools(body.get("tools"))
    choice, echo_choice = chat_tool_choice(body.get("tool_choice"))
    parallel = params.flag(body.get("parallel_tool_calls"), "parallel_tool_calls")
    if tools:
        # Chat refuses tool_choice and parallel_tool_calls without tools (OpenAI's 400);
        # Codex sends them on every request.
        chat["tools"] = tools
        if choice is not None:
            chat["tool_choice"] = choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    return _Tools(echo_tools, echo_choice, parallel)


@dataclass(slots=True)
class _Settings:
    """The request's output and sampling settings, checked (None: not given)."""

    text_format: dict[str, Any]  # as the Response shows it
    response_format: dict[str, Any] | None  # chat's, None for plain text
    verbosity: str | None
    effort: str | None
    summary: str | None
    temperature: float | None
    top_p: float | None
    max_output: int | None
    tier: str | None
    user: str | None
    safety: str | None
    cache_key: str | None
    retention: str | None

    def chat_fields(self) -> Iterator[tuple[str, object]]:
        """The chat request's fields for those given, by chat's names."""
        upstream = {
            "verbosity": self.verbosity,
            "reasoning_effort": self.effort,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_completion_tokens": self.max_output,
            "service_tier": self.tier,
            "user": self.user,
            "safety_identifier": self.safety,
            "prompt_cache_key": self.cache_key,
            "prompt_cache_retention": self.retention,
        }
        return ((key, value) for key, value in upstream.items() if value is not None)


def _settings(body: dict[str, Any]) -> _Settings:
    text = params.mapping(body.get("text"), "text") or {}
    text_format, response_format = _format(text.get("format"))
    verbosity = params.choice(text.get("verbosity"), "text.verbosity", ("low", "medium", "high"))
    reasoning = params.mapping(body.get("reasoning"), "reasoning") or {}
    effort = params.choice(reasoning.get("effort"), "reasoning.effort", _EFFORTS)
    summary = params.choice(reasoning.get("summary"), "reasoning.summary", _SUMMARIES)
    if summary is None:
        summary = params.choice(
            reasoning.get("generate_summary"), "reasoning.generate_summary", _SUMMARIES
        )
    return _Settings(
        text_format=text_format,
        response_format=response_format,
        verbosity=verbosity,
        effort=effort,
        summary=summary,
        temperature=params.number(body.get("temperature"), "temperature", 0, 2),
        top_p=params.number(body.get("top_p"), "top_p", 0, 1),
        max_output=params.integer(body.get("max_output_tokens"), "max_output_tokens", 1),
        tier=params.choice(body.get("service_tier"), "service_tier", _TIERS),
        user=params.text(body.get("user"), "user"),
        safety=params.text(body.get("safety_identifier"), "safety_identifier"),
        cache_key=params.text(body.get("prompt_cache_key"), "prompt_cache_key"),
        retention=params.choice(
            body.get("prompt_cache_retention"), "prompt_cache_retention", ("in_memory", "24h")
        ),
    )


def _echo(
    body: dict[str, Any], instructions: str | None, tools: _Tools, settings: _Settings
) -> Echo:
    """The request's settings as its Response shows them, defaults filled in."""
    return Echo(
        instructions=instructions,
        tools=tools.tools,
        tool_choice=tools.choice,
        parallel_tool_calls=True if tools.parallel is None else tools.parallel,
        text_format=settings.text_format,
        verbosity=settings.verbosity or "medium",
        reasoning_effort=settings.effort,
        reasoning_summary=settings.summary,
        temperature=1.0 if settings.temperature is None else settings.temperature,
        top_p=1.0 if settings.top_p is None else settings.top_p,
        max_output_tokens=settings.max_output,
        max_tool_calls=params.integer(body.get("max_tool_calls"), "max_tool_calls", 0),
        metadata=_metadata(body.get("metadata")),
        truncation=params.choice(body.get("truncation"), "truncation", ("auto", "disabled"))
        or "disabled",
        user=settings.user,
        safety_identifier=settings.safety,
        prompt_cache_key=settings.cache_key,
        prompt_cache_retention=settings.retention,
        service_tier=settings.tier,
    )


def _refuse_logprobs(body: dict[str, Any]) -> None:
    # Chat logprobs are not translated into output_text.logprobs: asking for them is refused
    # rather than answered with none.
    if params.integer(body.get("top_logprobs"), "top_logprobs", 0):
        raise unsupported("top_logprobs", "top_logprobs is not available through the proxy")
    include = params.array(body.get("include"), "include") or []
    for i, value in enumerate(include):
        if not isinstance(value, str):
            raise wrong_type(f"include[{i}]", "a string")
        if value == "message.output_text.logprobs":
            raise unsupported(
                f"include[{i}]", "message.output_text.logprobs is not available through the proxy"
            )


def _format(value: object) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The Response's ``text.format`` and the chat ``response_format`` (None for plain text)."""
    if value is None:
        return {"type": "text"}, None
    if not isinstance(value, dict):
        raise wrong_type("text.format", "an object")
    kind = value.get("type")
    if kind == "text":
        return {"type": "text"}, None
    if kind == "json_object":
        return {"type": "json_object"}, {"type": "json_object"}
    if kind != "json_schema":
        raise params.invalid_value(
            "text.format.type", "must be 'text', 'json_schema' or 'json_object'"
        )
    name = params.text(value.get("name"), "text.format.name", required=True)
    schema = params.mapping(value.get("schema"), "text.format.schema")
    if schema is None:
        raise params.missing("text.format.schema")
    shown: dict[str, Any] = {"type": "json_schema", "name": name, "schema": schema}
    description = params.text(value.get("description"), "text.format.description")
    strict = params.flag(value.get("strict"), "text.format.strict")
    if description is not None:
        shown["description"] = description
    if strict is not None:
        shown["strict"] = strict
    inner = {key: item for key, item in shown.items() if key != "type"}
    return shown, {"type": "json_schema", "json_schema": inner}


def _metadata(value: object) -> dict[str, str]:
    found = params.mapping(value, "metadata") or {}
    for key, item in found.items():
        if not isinstance(item, str):
            raise wrong_type(f"metadata.{key}", "a string")
    return dict(found)
