"""An Anthropic Messages request as the chat pipeline takes it (sans-IO): the canonical chat
request it is made, or, when it cannot be one, why, kept for the deployments that need it.

Every top-level field is translated, dropped (it steers Anthropic's cost, caching or capacity,
not the answer) or refused with a 400 naming it (docs/anthropic-face.md). A refusal binds only a
deployment that needs the translation: to an ``api: anthropic`` upstream the request goes as it
came but for ``model`` (``passthrough_body``). A body that is no Messages request at all (not
JSON, no model, no messages, no max_tokens) is refused for every deployment.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.config import THINKING_BUDGETS
from proxy.core.errors import InvalidRequest
from proxy.core.request import ClientRequest, encode_body, parse_request, read_object
from proxy.normalize.faces.anthropic.content import chat_messages, only_anthropic
from proxy.normalize.faces.anthropic.tools import chat_tool_choice, chat_tools
from proxy.normalize.responses import params
from proxy.normalize.responses.params import invalid_value, missing, unsupported, wrong_type

__all__ = ["MessagesCall", "clamp_max_tokens", "messages_request", "passthrough_body"]

_TRANSLATED: Final = frozenset({
    "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
    "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "output_config",
    "output_format",
})  # fmt: skip
# They steer what Anthropic bills, caches, keeps in context or where it runs, not the answer.
_DROPPED: Final = frozenset({
    "cache_control", "context_management", "service_tier", "inference_geo", "speed",
    "user_profile_id",
})  # fmt: skip
_ONLY_ANTHROPIC: Final = {
    "container": "a code execution container at Anthropic",
    "mcp_servers": "MCP servers that Anthropic calls",
}
# Anthropic's efforts as chat's reasoning_effort: beyond "high", none that every dialect takes
# (their thinking budgets stop at high, proxy.core.config.THINKING_BUDGETS).
_EFFORTS: Final = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
# The effort of adaptive thinking left to the model: Anthropic's own default is in between.
_ADAPTIVE: Final = "medium"
_ID_CHARACTERS: Final = string.ascii_letters + string.digits


# Made per request, so not frozen (proxy.normalize.fields.RequestContext says why).
@dataclass(slots=True)
class MessagesCall:
    body: dict[str, Any]  # the client's request as it came, for an Anthropic upstream
    message_id: str  # the answer's id, one per request: every attempt's carries the same
    # Why the chat translation refused it: told only to a deployment that needs it.
    refusal: InvalidRequest | None = None


def messages_request(raw: bytes) -> tuple[ClientRequest, MessagesCall]:
    """The chat request a Messages request body is answered by, and the call's particulars;
    InvalidRequest for a body that is no Messages request.

    What chat cannot say (a server tool, an MCP server) may still go to an Anthropic upstream:
    then the request routes by its model, stream and max_tokens alone, and the refusal waits
    for a deployment that needs the translation."""
    body = read_object(raw)
    routing = _routing_request(body, len(raw))
    call = MessagesCall(body, "msg_" + "".join(secrets.choice(_ID_CHARACTERS) for _ in range(24)))
    try:
        # The chat body is checked as any client's: what it says must be a valid chat request.
        request = parse_request(encode_body(chat_body(body)), "chat")
    except InvalidRequest as exc:
        call.refusal = exc
        return routing, call
    # Reserved for the larger of what may go upstream: the chat request or the client's own.
    request.size = max(request.size, len(raw))
    return request, call


def _routing_request(body: dict[str, Any], size: int) -> ClientRequest:
    """The request routed when the translation refuses; raises for what no upstream takes."""
    model = params.text(body.get("model"), "model", required=True)
    if not model:
        raise wrong_type("model", "a non-empty string")
    messages = params.array(body.get("messages"), "messages")
    if messages is None:
        raise missing("messages")
    if not messages:
        raise invalid_value("messages", "must hold at least one message")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise wrong_type(f"messages[{i}]", "an object")
    max_tokens = params.integer(body.get("max_tokens"), "max_tokens", 0)
    if max_tokens is None:
        raise missing("max_tokens")
    stream = bool(params.flag(body.get("stream"), "stream"))
    # A copy: clamp_max_tokens may lower it, and the body passed through stays as it came.
    return ClientRequest("chat", dict(body), model, stream, stream, max_tokens, 1, messages, size)


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The canonical chat request for the Messages request ``body``; InvalidRequest naming the
    field for what chat cannot say."""
    for field in body:
        if field in _ONLY_ANTHROPIC and body[field] is not None:
            raise only_anthropic(field, _ONLY_ANTHROPIC[field])
        if field not in _TRANSLATED and field not in _DROPPED and field not in _ONLY_ANTHROPIC:
            raise unsupported(field, f"'{field}' is not a Messages API parameter the proxy knows")
    chat: dict[str, Any] = {"model": body["model"]}
    chat["messages"] = chat_messages(body.get("system"), body["messages"])
    max_tokens = body["max_tokens"]
    if max_tokens == 0:
        raise only_anthropic("max_tokens", "0, which warms Anthropic's prompt cache")
    # Anthropic's max_tokens counts thinking as chat's max_completion_tokens counts reasoning
    # (OpenAI's reasoning models refuse max_tokens).
    chat["max_completion_tokens"] = max_tokens
    stop = params.array(body.get("stop_sequences"), "stop_sequences") or []
    for i, sequence in enumerate(stop):
        if not isinstance(sequence, str):
            raise wrong_type(f"stop_sequences[{i}]", "a string")
    if stop:
        chat["stop"] = stop
    for field in ("temperature", "top_p"):
        value = params.number(body.get(field), field, 0, 1)
        if value is not None:
            chat[field] = value
    # Not OpenAI's, but OpenAI-compatible servers (vLLM, llama.cpp) take it, and a native
    # dialect that cannot say it refuses it.
    top_k = params.integer(body.get("top_k"), "top_k", 0)
    if top_k is not None:
        chat["top_k"] = top_k
    _add_tools(chat, body)
    output_config = params.mapping(body.get("output_config"), "output_config") or {}
    for key in output_config:
        if key not in ("effort", "format", "task_budget"):  # task_budget: a cost control
            raise unsupported(f"output_config.{key}", f"'output_config.{key}' is not known")
    effort = _reasoning_effort(body.get("thinking"), output_config.get("effort"))
    if effort is not None:
        chat["reasoning_effort"] = effort
    response_format = _response_format(body, output_config)
    if response_format is not None:
        chat["response_format"] = response_format
    metadata = params.mapping(body.get("metadata"), "metadata") or {}
    # Claude Code's user_id is a JSON string: an opaque id all the same, kept as it is.
    user = params.text(metadata.get("user_id"), "metadata.user_id")
    if user:
        chat["user"] = user
    if params.flag(body.get("stream"), "stream"):
        chat["stream"] = True
        # The answer's message_delta needs the final usage, whatever the client asked.
        chat["stream_options"] = {"include_usage": True}
    return chat


def _add_tools(chat: dict[str, Any], body: dict[str, Any]) -> None:
    tools = chat_tools(body.get("tools"))
    choice, parallel = chat_tool_choice(body.get("tool_choice"), bool(tools))
    if tools:
        # Chat refuses tool_choice and parallel_tool_calls without tools (OpenAI's 400).
        chat["tools"] = tools
        if choice is not None:
            chat["tool_choice"] = choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel


def _reasoning_effort(thinking: object, effort: object) -> str | None:
    """Chat's reasoning_effort for thinking enabled or adaptive: output_config.effort when
    given, else the effort whose default budget the client's budget_tokens reaches."""
    chosen = params.choice(effort, "output_config.effort", tuple(_EFFORTS))
    config = params.mapping(thinking, "thinking")
    if config is None:
        return None  # an effort without thinking: nothing a chat model is set to by it
    kind = params.choice(config.get("type"), "thinking.type", ("enabled", "adaptive", "disabled"))
    if kind is None:
        raise missing("thinking.type")
    # display (summarized or omitted) is how the answer shows thinking, not whether it thinks.
    params.choice(config.get("display"), "thinking.display", ("summarized", "omitted"))
    if kind == "disabled":
        return None
    if chosen is not None:
        return _EFFORTS[chosen]
    if kind == "adaptive":
        return _ADAPTIVE
    budget = params.integer(config.get("budget_tokens"), "thinking.budget_tokens", 1)
    if budget is None:
        raise missing("thinking.budget_tokens")
    return effort_for_budget(budget)


def effort_for_budget(budget: int) -> str:
    """The largest effort whose default thinking budget ``budget`` reaches, at least "low"."""
    reached = [effort for effort, tokens in THINKING_BUDGETS.items() if tokens <= budget]
    best = max(reached, key=THINKING_BUDGETS.__getitem__, default="low")
    return best if THINKING_BUDGETS[best] >= THINKING_BUDGETS["low"] else "low"


def _response_format(body: dict[str, Any], output_config: dict[str, Any]) -> dict[str, Any] | None:
    """Anthropic's structured output (output_config.format, or the deprecated output_format)
    as chat's json_schema response_format: strict, as Anthropic's is."""
    param = "output_config.format"
    found = output_config.get("format")
    if found is None:
        param, found = "output_format", body.get("output_format")
    value = params.mapping(found, param)
    if value is None:
        return None
    params.choice(value.get("type"), f"{param}.type", ("json_schema",))
    schema = params.mapping(value.get("schema"), f"{param}.schema")
    if schema is None:
        raise missing(f"{param}.schema")
    return {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema, "strict": True},
    }


def passthrough_body(body: dict[str, Any], upstream_model: str) -> bytes:
    """The client's Messages request for an Anthropic upstream: the upstream model's name, and
    nothing else changed (keys in their order)."""
    return encode_body({**body, "model": upstream_model})


def clamp_max_tokens(request: ClientRequest, limit: int) -> None:
    """Lower the chat request's token limit to ``limit`` (the model's configured one) when it
    is above: Claude Code asks 32000 of every model."""
    if request.max_tokens is not None and request.max_tokens > limit:
        request.max_tokens = limit
    for field in ("max_completion_tokens", "max_tokens"):
        value = request.body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > limit:
            request.body[field] = limit
