"""The canned upstream: recorded OpenAI answers served by nginx, routed by path.

    POST /plain/v1/chat/completions    tests/fixtures/providers/openai.chat.json, whole
    POST /stream/v1/chat/completions   a 53-event stream (below), as fast as nginx sends it
    POST /slow/v1/chat/completions     the same 53 events, one every ``slow_delay`` seconds

The stream is built from tests/fixtures/providers/openai.chat.stream.sse: its first 50 content
chunks (the first carrying ``role``), its finish chunk, its usage chunk and ``[DONE]``.
"""

from __future__ import annotations

import json
import resource
from pathlib import Path

from procs import Service, free_port, wait_http

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "providers"
TEMPLATE = Path(__file__).resolve().parent / "nginx.conf.template"
ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")
STREAM_EVENTS = 53


def stream_events() -> list[bytes]:
    """The 53 ``data:`` events of the benchmark stream, each with its blank line."""
    raw = (FIXTURES / "openai.chat.stream.sse").read_bytes()
    chunks = [
        json.loads(event[5:])
        for event in raw.split(b"\n\n")
        if event.startswith(b"data:") and event.strip() != b"data: [DONE]"
    ]
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    finish = next(c for c in chunks if c["choices"] and c["choices"][0].get("finish_reason"))
    usage = next(c for c in chunks if not c["choices"] and c.get("usage"))
    picked = [json.loads(json.dumps(c)) for c in content[:50]]
    picked[0]["choices"][0]["delta"] = {"role": "assistant", **picked[0]["choices"][0]["delta"]}
    events = [
        b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n"
        for c in [*picked, finish, usage]
    ]
    events.append(b"data: [DONE]\n\n")
    assert len(events) == STREAM_EVENTS
    return events


def _nginx_string(text: str) -> str:
    # A single-quoted nginx string: the config parser reads \\ \' \n; echo then interpolates $.
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return "'" + escaped.replace("$", "${dollar}") + "'"


def _slow_directives(events: list[bytes], delay: float) -> str:
    lines = []
    for event in events:
        lines.append(f"            echo_sleep {delay};")
        lines.append(f"            echo -n {_nginx_string(event.decode())};")
        lines.append("            echo_flush;")
    return "\n".join(lines)


# The body of OpenAI's 403 for a project without access to a model (its error envelope).
REFUSAL = {
    "error": {
        "message": "Project `proj_bench` does not have access to model `bench`",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}


def write_upstream(directory: Path, port: int, slow_delay: float) -> Path:
    """Write the bodies and nginx.conf for an upstream on 127.0.0.1:``port``; returns the conf."""
    www = directory / "www"
    www.mkdir(parents=True, exist_ok=True)
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (directory / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    body = json.loads((FIXTURES / "openai.chat.json").read_bytes())
    (www / "chat.json").write_bytes(json.dumps(body, separators=(",", ":")).encode())
    events = stream_events()
    (www / "stream.sse").write_bytes(b"".join(events))
    (www / "error.json").write_bytes(json.dumps(REFUSAL, separators=(",", ":")).encode())
    conf = TEMPLATE.read_text().format(
        echo_module=ECHO_MODULE,
        dir=directory,
        port=port,
        # At most the hard limit: nginx's setrlimit cannot raise it.
        nofile=resource.getrlimit(resource.RLIMIT_NOFILE)[1],
        slow_delay=slow_delay,
        slow_events=_slow_directives(events, slow_delay),
    )
    path = directory / "nginx.conf"
    path.write_text(conf)
    # nginx's workers run as nobody: everything they serve must be readable by others.
    for item in [directory, *directory.rglob("*")]:
        item.chmod(0o755 if item.is_dir() else 0o644)
    return path


def start_upstream(tmp: Path, slow_delay: float = 0.05) -> tuple[Service, int]:
    """nginx serving the canned answers from ``tmp`` (made readable to its workers), and its
    port, once it answers."""
    tmp.chmod(0o711)  # nginx's workers (user nobody) read the canned answers in here
    port = free_port()
    conf = write_upstream(tmp / "nginx", port, slow_delay)
    nginx = Service("nginx", ["nginx", "-c", str(conf), "-p", str(conf.parent)], tmp / "n.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", nginx, 10)
    except BaseException:
        nginx.stop()
        raise
    return nginx, port
