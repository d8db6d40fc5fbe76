"""The Responses API (``POST /v1/responses``), answered by the chat pipeline (sans-IO).

    request.py      a Responses request -> the chat completions request, and its ``Echo``
    messages.py     its instructions and input items -> chat messages
    tools.py        its function tools and tool_choice, in chat's shape
    params.py       typed reads of its parameters, each refusal naming one
    echo.py         what a Response repeats of its request; the Response object; usage
    output.py       an answer's output items as its deltas arrive, and their events
    whole.py        a canonical chat completion -> a Response
    stream.py       a canonical chat stream -> Responses events, framed
    passthrough.py  a provider serving the Responses API itself: its answer held to the contract
    shapes.py       the keys each object of the Responses API may carry (OpenAI's schema)

The proxy keeps no responses: what needs a stored one is refused (``request.refuse_stateful``).
docs/responses-api.md is the user's account of all of it.
"""

from __future__ import annotations

from proxy.normalize.responses.echo import Echo, responses_usage
from proxy.normalize.responses.output import make_id
from proxy.normalize.responses.passthrough import PassthroughEvents, hold_response
from proxy.normalize.responses.request import chat_body, refuse_stateful
from proxy.normalize.responses.stream import ResponsesEvents, responses_frames
from proxy.normalize.responses.whole import response_body

__all__ = [
    "Echo",
    "PassthroughEvents",
    "ResponsesEvents",
    "chat_body",
    "hold_response",
    "make_id",
    "refuse_stateful",
    "response_body",
    "responses_frames",
    "responses_usage",
]
