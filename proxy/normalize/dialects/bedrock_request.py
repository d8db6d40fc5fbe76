"""The Converse (and ConverseStream) request for a client's OpenAI chat request (sans-IO).

Written against the Bedrock Runtime API reference (ConverseRequest): ``messages`` and
``system`` (bedrock_messages.py), ``inferenceConfig`` (maxTokens, temperature, topP,
stopSequences), ``toolConfig`` (``toolSpec`` with ``inputSchema.json``, ``toolChoice`` auto,
any or tool), ``outputConfig.textFormat`` for a JSON schema, and the model's own fields in
``additionalModelRequestFields`` (the thinking budget, as Anthropic's models on Bedrock take
it). The model is in the URL, and so is the stream. Every OpenAI field is translated, dropped
or refused as native_request.py judges it for every native API; a field that is not OpenAI's is
one of Converse's own (``guardrailConfig``, ``performanceConfig``), passed on as it came.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.anthropic_request import thinking_budget
from proxy.normalize.dialects.bedrock_messages import (
    API,
    CACHE_POINT,
    has_tool_blocks,
    translate_messages,
)
from proxy.normalize.dialects.dialect import RequestOptions
from proxy.normalize.dialects.native_messages import function_tools
from proxy.normalize.dialects.native_request import (
    CHAT_FIELDS,
    OPENAI_ONLY,
    extras,
    invalid,
    merge,
    merge_part,
    reasoning_effort,
    refuse,
    require_chat,
    response_format,
    stop_sequences,
    unsupported,
    wrong_type,
)

# OpenAI's fields that would change the answer and that Converse cannot honour.
_REFUSED: Final = (
    "n",
    "logprobs",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "seed",
    "parallel_tool_calls",
    *OPENAI_ONLY,
)
# top_k is not OpenAI's but a common extension: the model's own field (Anthropic's name).
_READ: Final = CHAT_FIELDS | {"top_k"}


def build_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    """The Converse body for ``request``; raises ``InvalidRequest`` for what it cannot do."""
    require_chat(request.endpoint, API)
    body = request.body
    refuse(body, _REFUSED, API)
    system, messages = translate_messages(body["messages"])
    out: dict[str, Any] = {"messages": messages}
    if system:
        out["system"] = system
    config: dict[str, Any] = {}
    model_fields: dict[str, Any] = {}
    _thinking(body, request.max_tokens, options, messages, config, model_fields)
    for ours, theirs in (("temperature", "temperature"), ("top_p", "topP")):
        if body.get(ours) is not None:
            config[theirs] = body[ours]  # Converse's own 400 tells a value it takes not
    stop = stop_sequences(body)
    if stop:
        config["stopSequences"] = stop
    if body.get("top_k") is not None:
        model_fields["top_k"] = body["top_k"]
    tool_config = _tool_config(body, messages)
    output_config = _output_config(body)
    given = extras(body, _READ)
    merge_part(config, given, "inferenceConfig")
    merge_part(model_fields, given, "additionalModelRequestFields")
    if config:
        out["inferenceConfig"] = config
    if tool_config is not None:
        out["toolConfig"] = tool_config
    if output_config is not None:
        out["outputConfig"] = output_config
    if model_fields:
        out["additionalModelRequestFields"] = model_fields
    merge(out, given)
    return out


def _thinking(
    body: dict[str, Any],
    limit: int | None,
    options: RequestOptions,
    messages: list[dict[str, Any]],
    config: dict[str, Any],
    model_fields: dict[str, Any],
) -> None:
    """maxTokens, and the thinking budget for reasoning_effort, fitted as Anthropic's are (the
    models that think on Bedrock with a budget are Anthropic's). Without reasoning, Converse
    needs no maxTokens: the model's default holds."""
    effort = reasoning_effort(body)
    if effort is None or effort == "none":
        if limit is not None:
            config["maxTokens"] = limit
        return
    # A tool loop's turn would need the signed reasoning blocks back, which OpenAI's messages
    # cannot carry (as on Anthropic's own API): it goes without thinking.
    last = messages[-1]["content"]
    in_tool_loop = any("toolResult" in block for block in last)
    max_tokens, thinking = thinking_budget(body, limit, options, in_tool_loop)
    config["maxTokens"] = max_tokens
    if thinking is not None:
        model_fields["thinking"] = thinking


def _tool_config(body: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """toolConfig: the functions offered (with a cache point after a tool marked so), and how
    the model must choose. tool_choice none offers none, as for APIs without a "none" choice;
    a named function keeps them all offered and names it (``toolChoice.tool``)."""
    functions, mode = function_tools(body, API)
    choice = body.get("tool_choice")
    named = isinstance(choice, dict) and choice.get("type") == "function"
    if named:
        functions, _ = function_tools({"tools": body.get("tools")}, API)
    if mode == "none" or not functions:
        if has_tool_blocks(messages):
            # Converse reads the history's tool calls against the tools offered.
            why = "Converse needs the tools offered when the messages hold tool calls"
            if mode == "none" and functions:
                raise unsupported("tool_choice", API, f"'none' cannot be said: {why}")
            raise invalid("tools", why)
        return None
    # function_tools has checked each tool: an object with its function.
    marked = {tool["function"]["name"] for tool in body["tools"] if "cache_control" in tool}
    tools: list[dict[str, Any]] = []
    for function in functions:
        tools.append({"toolSpec": _tool_spec(function)})
        if function["name"] in marked:
            tools.append(dict(CACHE_POINT))
    out: dict[str, Any] = {"tools": tools}
    if named:
        assert isinstance(choice, dict)
        out["toolChoice"] = {"tool": {"name": choice["function"]["name"]}}
    elif mode == "required":
        out["toolChoice"] = {"any": {}}
    return out


def _tool_spec(function: dict[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}  # OpenAI's "no arguments"
    if not isinstance(parameters, dict):
        raise wrong_type(f"tools[{function['name']}].function.parameters", "an object")
    spec: dict[str, Any] = {"name": function["name"]}
    description = function.get("description")
    if isinstance(description, str) and description:
        spec["description"] = description
    spec["inputSchema"] = {"json": parameters}
    if function.get("strict") is True:
        spec["strict"] = True
    return spec


def _output_config(body: dict[str, Any]) -> dict[str, Any] | None:
    """response_format json_schema as Converse's structured output (``outputConfig.textFormat``,
    the schema as a JSON string); json_object has no counterpart: Converse needs a schema."""
    kind, schema = response_format(body, API)
    if kind == "text":
        return None
    if kind == "json_object":
        raise unsupported(
            "response_format.type",
            API,
            "its structured output takes a JSON schema: use json_schema",
        )
    definition: dict[str, Any] = {"schema": orjson.dumps(schema).decode()}
    spec = body["response_format"].get("json_schema")
    for key in ("name", "description"):
        value = spec.get(key) if isinstance(spec, dict) else None
        if isinstance(value, str) and value:
            definition[key] = value
    return {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": definition}}}
