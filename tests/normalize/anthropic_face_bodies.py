"""Messages request bodies as clients send them, for the Anthropic face's tests.

``claude_code_body`` is shaped after what Claude Code 2.1.x sends on every request (issue 58):
top-level system blocks with cache_control, ``role: "system"`` turns inside ``messages``,
adaptive thinking with its display omitted, ``output_config.effort``, ``context_management``,
12 tools with ``defer_loading`` and ``cache_control``, a ``tool_result`` with cache_control,
``metadata.user_id`` as a JSON string and ``max_tokens: 32000``; about 50 kB of JSON.
"""

from __future__ import annotations

import json
from typing import Any

EPHEMERAL = {"type": "ephemeral"}
USER_ID = json.dumps(
    {
        "device_id": "5f0c8a1e9b7d4c2a8e6f1b3d5a7c9e0f2b4d6a8c0e2f4a6b8d0c2e4f6a8b0c2d",
        "account_uuid": "",
        "session_id": "0b6f3c2e-8d4a-4f7b-9e1c-2a5d8f0b3c6e",
    }
)
_TOOL_NAMES = (
    "Bash",
    "Glob",
    "Grep",
    "Read",
    "Edit",
    "Write",
    "NotebookEdit",
    "WebFetch",
    "TodoWrite",
    "WebSearch",
    "BashOutput",
    "KillShell",
)
_PROSE = (
    "Use this tool when the task needs it. Prefer the dedicated tools for reading and editing "
    "files over shell commands, quote paths that contain spaces, and never run destructive "
    "commands without the user's consent. Results longer than the limit are truncated. "
)


def claude_code_tool(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name}: " + _PROSE * 10,
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "What to run or read."},
                "timeout": {"type": "number", "description": "Milliseconds, at most 600000."},
                "description": {"type": "string", "description": "Five to ten words."},
            },
            "required": ["command"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
        "defer_loading": name in ("NotebookEdit", "WebFetch", "KillShell"),
    }


def claude_code_body(*, stream: bool = True) -> dict[str, Any]:
    tools = [claude_code_tool(name) for name in _TOOL_NAMES]
    tools[-1]["cache_control"] = EPHEMERAL
    return {
        "model": "claude-sonnet-4-5",
        "messages": [
            {
                "role": "system",
                "content": "<system-reminder>The working directory is /repo.</system-reminder>",
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>CLAUDE.md: " + _PROSE * 20},
                    {"type": "text", "text": "List the Python files.", "cache_control": EPHEMERAL},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBxgCKkB" * 20},
                    {"type": "text", "text": "I'll look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A",
                        "name": "Glob",
                        "input": {"command": "**/*.py"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01A",
                        "content": [{"type": "text", "text": "proxy/app.py\nproxy/cli.py"}],
                        "cache_control": EPHEMERAL,
                    }
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        ],
        "system": [
            {
                "type": "text",
                "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                "cache_control": EPHEMERAL,
            },
            {"type": "text", "text": "You are an interactive CLI tool. " + _PROSE * 40},
        ],
        "tools": tools,
        "metadata": {"user_id": USER_ID},
        "max_tokens": 32000,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "stream": stream,
    }
