"""Text Generation Inference's native API (``POST {base_url}/generate`` and
``/generate_stream``), for ``/v1/completions``. TGI's Messages API is OpenAI's: ``api: openai``.

The request is ``{inputs, parameters}`` (TGI's docs/openapi.json, GenerateRequest); the stream
is one event per token, ``{token: {text, special}, generated_text, details}``, whose last
event repeats the whole text in ``generated_text`` (never given again) and carries
``details`` (finish_reason, counts), asked for with ``details: true``. No ``[DONE]``: that last
event ends it. A whole answer is ``{generated_text, details}``.

docs/providers/tgi.md says what is translated and what is refused.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.request import ClientRequest
from proxy.normalize.dialects.dialect import Dialect, RequestOptions, stateless
from proxy.normalize.dialects.native_request import (
    COMPLETION_FIELDS,
    extras,
    is_set,
    merge,
    merge_part,
    refuse,
    single_prompt,
    stop_sequences,
)
from proxy.normalize.fields import RequestContext

API: Final = "TGI's generate API"
# Completions' logprobs has offsets into the text that TGI's per-token ones do not give.
_REFUSED: Final = ("n", "logprobs", "echo", "logit_bias", "suffix", "presence_penalty")
_FINISH: Final = {"eos_token": "stop", "stop_sequence": "stop", "length": "length"}


def build_request(request: ClientRequest, options: RequestOptions) -> dict[str, Any]:
    """TGI serves one model and takes no model name; whether it streams is in the path."""
    body = request.body
    refuse(body, _REFUSED, API)
    # details: the finish reason and the counts come only with them. A whole answer has no
    # prompt count but the decoder's input tokens (as TGI's own /v1/completions asks them).
    parameters: dict[str, Any] = {"details": True}
    if not request.stream:
        parameters["decoder_input_details"] = True
    if request.max_tokens is not None:
        parameters["max_new_tokens"] = request.max_tokens
    temperature = body.get("temperature")
    if temperature == 0 and not isinstance(temperature, bool):
        # OpenAI's temperature 0 is greedy decoding; TGI takes no temperature 0 but samples
        # only when told.
        parameters["do_sample"] = False
    else:
        parameters["do_sample"] = True  # OpenAI samples unless told otherwise
        if temperature is not None:
            parameters["temperature"] = temperature
    top_p = body.get("top_p")
    if top_p is not None and top_p != 1:  # TGI takes top_p below 1 only; 1 is no nucleus
        parameters["top_p"] = top_p
    stop = stop_sequences(body)
    if stop is not None:
        parameters["stop"] = stop
    for name in ("seed", "frequency_penalty"):
        if body.get(name) is not None:
            parameters[name] = body[name]
    if is_set(body, "best_of"):
        parameters["best_of"] = body["best_of"]  # the same meaning: the best of so many
    given = extras(body, COMPLETION_FIELDS)
    merge_part(parameters, given, "parameters")
    # TGI's body has nothing but inputs and parameters: a client's other fields (top_k,
    # repetition_penalty, grammar, ...) are parameters.
    merge(parameters, given)
    return {"inputs": single_prompt(body, API), "parameters": parameters}


def _error(payload: dict[str, Any]) -> dict[str, Any]:
    return {"message": str(payload["error"]), "type": payload.get("error_type")}


def _finish(details: dict[str, Any]) -> object:
    reason = details.get("finish_reason")
    return _FINISH.get(reason, reason) if isinstance(reason, str) else None


def adapt_event(payload: dict[str, Any], ctx: RequestContext) -> tuple[dict[str, Any] | None, bool]:
    if payload.get("error") is not None:
        return {"error": _error(payload)}, True
    token = payload.get("token")
    text = None
    # Special tokens (</s>, <|eot_id|>) are not text (docs/canonical-output.md section 2).
    if isinstance(token, dict) and token.get("special") is not True:
        text = token.get("text")
    choice: dict[str, Any] = {"index": 0, "text": text}
    chunk: dict[str, Any] = {"choices": [choice]}
    final = payload.get("generated_text") is not None
    details = payload.get("details")
    if final and isinstance(details, dict):
        choice["finish_reason"] = _finish(details)
        chunk["usage"] = {
            "prompt_tokens": details.get("input_length"),
            "completion_tokens": details.get("generated_tokens"),
        }
    return chunk, final


def adapt_response(body: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    if body.get("error") is not None:
        return {"error": _error(body)}
    details = body.get("details")
    if not isinstance(details, dict):
        details = {}
    choice = {"index": 0, "text": body.get("generated_text"), "finish_reason": _finish(details)}
    out: dict[str, Any] = {"choices": [choice]}
    prefill = details.get("prefill")
    if isinstance(prefill, list) and prefill:
        out["usage"] = {
            "prompt_tokens": len(prefill),
            "completion_tokens": details.get("generated_tokens"),
        }
    return out


DIALECT: Final = Dialect(
    "tgi",
    paths={"completions": "/generate"},
    stream_paths={"completions": "/generate_stream"},
    adapter=stateless(adapt_event),
    adapt_response=adapt_response,
    request=build_request,
    native=True,
)
