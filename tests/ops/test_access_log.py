"""The access log: one JSON line per API request, with the same tokens as the metrics, and never
a key, a prompt or a header."""

from __future__ import annotations

import asyncio
import select
import socket
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import openai
import orjson
import pytest

from proxy.core.exchange import Exchange
from proxy.core.usage import Usage
from proxy.ops.access_log import AccessLog, access_record
from proxy.ops.outlet import Outlet
from tests.support.metrics import (
    ALPHA_KEY,
    BETA_KEY,
    Stage,
    scrape,
    serve,
    stage,
    wait_for,
    write_config,
)
from tests.support.replay import recordings

FIELDS = {
    "ts",
    "request_id",
    "team",
    "model",
    "provider",
    "endpoint",
    "path",
    "stream",
    "status",
    "error_type",
    "upstream_error",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "usage_source",
    "cost_usd",
    "duration_s",
    "ttft_s",
    "overhead_s",
    "upstream_s",
    "client_disconnected",
    "fixes",
    "cache",
}
SECRET_PROMPT = "the-secret-prompt-7f3a"
MADE_UP_KEY = "sk-made-up-secret-key-91c2"
MODELS: dict[str, Any] = {
    "llama": {"provider": "emu", "model": "friendli"},
    "gpt-500": {"provider": "emu", "model": "openai@status=500"},
}


def test_access_record_fields() -> None:
    exchange = Exchange(
        "req-42",
        "chat",
        10.0,
        team="alpha",
        model="llama",
        provider="emu",
        path="/v1/chat/completions",
    )
    exchange.stream = True
    exchange.status = 200
    exchange.usage = Usage(8, 4, 12, cached_tokens=3, reasoning_tokens=1)
    exchange.fixes = frozenset({"usage", "role", "not-a-listed-fix"})
    exchange.upstream_wait = 0.5
    exchange.client_wait = 0.25
    exchange.first_token_at = 10.3
    exchange.ended = 11.0
    when = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    record = access_record(exchange, when)
    assert set(record) == FIELDS
    line = orjson.loads(orjson.dumps(record, option=orjson.OPT_UTC_Z))
    assert line == {
        "ts": "2025-01-02T03:04:05.678000Z",
        "request_id": "req-42",
        "team": "alpha",
        "model": "llama",
        "provider": "emu",
        "endpoint": "chat",
        "path": "/v1/chat/completions",
        "stream": True,
        "status": 200,
        "error_type": None,
        "upstream_error": None,
        "prompt_tokens": 8,
        "completion_tokens": 4,
        "cached_tokens": 3,
        "reasoning_tokens": 1,
        "usage_source": "upstream",
        "cost_usd": None,  # the model has no price: unknown, never 0
        "duration_s": 1.0,
        "ttft_s": 0.3,
        "overhead_s": 0.25,
        "upstream_s": 0.5,
        "client_disconnected": False,
        "fixes": ["role", "usage"],
        "cache": None,  # not a cached model's
    }


def test_a_client_gone_before_any_response_is_a_499_without_tokens() -> None:
    exchange = Exchange("req-43", "chat", 10.0, team="alpha")
    exchange.usage = Usage(2, 0, 2, source="estimated")
    exchange.client_disconnected = True
    exchange.ended = 12.0
    record = access_record(exchange, datetime.now(UTC))
    assert record["status"] == 499 and record["client_disconnected"] is True
    assert record["prompt_tokens"] is None and record["usage_source"] is None
    assert record["ttft_s"] is None


def _exchange(request_id: str, model: str = "llama") -> Exchange:
    exchange = Exchange(request_id, "chat", 10.0, team="alpha", model=model, provider="emu")
    exchange.status = 200
    exchange.usage = Usage(8, 4, 12)
    exchange.ended = 10.5
    return exchange


def _messages(sock: socket.socket) -> list[bytes]:
    """What each write(2) to the other end carried (a SOCK_SEQPACKET keeps writes apart)."""
    sock.setblocking(False)
    out = []
    while True:
        try:
            out.append(sock.recv(1 << 20))
        except BlockingIOError:
            return out


async def test_a_loop_turn_s_lines_go_out_together_in_atomic_writes() -> None:
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with reader, writer:
        outlet = Outlet(writer.fileno())
        log = AccessLog(outlet)
        for i in range(40):  # about 18 kB of lines, all finished in one loop turn
            log.finished(_exchange(f"req-{i:02}"))
        assert _messages(reader) == []  # held until the turn ends
        await asyncio.sleep(0)
        writes = _messages(reader)
        outlet.close()
    assert 1 < len(writes) < 40
    for write in writes:
        # Each at most PIPE_BUF (atomic on the pipe the workers share), cut at a line end.
        assert len(write) <= select.PIPE_BUF and write.endswith(b"\n")
    lines = b"".join(writes).splitlines()
    assert [orjson.loads(line)["request_id"] for line in lines] == [
        f"req-{i:02}" for i in range(40)
    ]


async def test_a_line_longer_than_an_atomic_write_goes_out_whole_and_alone() -> None:
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with reader, writer:
        outlet = Outlet(writer.fileno())
        log = AccessLog(outlet)
        log.finished(_exchange("before"))
        log.finished(_exchange("long", model="m" * select.PIPE_BUF))
        log.finished(_exchange("after"))
        await asyncio.sleep(0)
        writes = _messages(reader)
        outlet.close()
    assert [orjson.loads(w)["request_id"] for w in writes] == ["before", "long", "after"]
    assert len(writes[1]) > select.PIPE_BUF


async def test_close_writes_what_is_held() -> None:
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with reader, writer:
        outlet = Outlet(writer.fileno())
        log = AccessLog(outlet)
        log.finished(_exchange("held"))
        log.close()
        assert [orjson.loads(w)["request_id"] for w in _messages(reader)] == ["held"]
        await asyncio.sleep(0)  # the turn's own flush then finds nothing left to write
        assert _messages(reader) == []
        outlet.close()


def test_without_a_loop_each_line_is_written_at_once(tmp_path: Path) -> None:
    with open(tmp_path / "access.log", "wb") as file:
        AccessLog(Outlet(file.fileno())).finished(_exchange("now"))
        assert orjson.loads((tmp_path / "access.log").read_bytes())["request_id"] == "now"


@pytest.fixture(scope="module")
def running() -> Iterator[Stage]:
    with stage() as built:
        yield built


@pytest.fixture
def access_file(tmp_path: Path) -> Iterator[BinaryIO]:
    """A file for an in-process proxy's access log, open until the test is over."""
    with (tmp_path / "access.log").open("wb") as file:
        yield file


async def test_one_line_per_api_request_and_no_secrets(
    running: Stage, access_file: BinaryIO
) -> None:
    log_path = Path(access_file.name)
    proxy = running.proxy(MODELS, access_log=True, access_log_fd=access_file.fileno())
    chat = f"{proxy.url}/chat/completions"
    messages = [{"role": "user", "content": SECRET_PROMPT}]
    sent: list[tuple[int, str]] = []
    async with aiohttp.ClientSession() as session:
        requests: list[tuple[str, dict[str, Any] | None, str]] = [
            (chat, {"model": "llama", "messages": messages, "stream": True}, ALPHA_KEY),
            (chat, {"model": "llama", "messages": messages}, BETA_KEY),
            (chat, {"model": "gpt-500", "messages": messages}, ALPHA_KEY),
            (chat, {"model": "made-up", "messages": messages}, ALPHA_KEY),
            (chat, {"model": "llama", "messages": messages}, MADE_UP_KEY),
            (f"{proxy.url}/models", None, ALPHA_KEY),
            # A path the proxy does not serve: 404, logged with the team and the path.
            (f"{proxy.url}/vector_stores/vs_1/files", None, BETA_KEY),
            (f"{proxy.url}/batches" + "/x" * 400, None, ALPHA_KEY),
            (f"{proxy.url}/assistants", None, MADE_UP_KEY),
        ]
        for i, (url, body, key) in enumerate(requests):
            headers = {"Authorization": f"Bearer {key}", "X-Request-Id": f"given-{i}"}
            if i % 2:
                del headers["X-Request-Id"]  # then the proxy makes one
            method = (
                session.post(url, json=body, headers=headers)
                if body
                else session.get(url, headers=headers)
            )
            async with method as response:
                await response.read()
                sent.append((response.status, response.headers["X-Request-Id"]))
        for path in ("/healthz", "/readyz", "/metrics"):  # not API requests: no line
            async with session.get(proxy.root + path) as response:
                assert response.status == 200

    def log_text() -> str:
        return log_path.read_text()

    def lines() -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in log_text().splitlines()]

    wait_for(lambda: len(lines()) >= len(requests), "the access log lines", seconds=10)
    logged = lines()
    assert len(logged) == len(requests)
    by_id = {line["request_id"]: line for line in logged}
    # In order of the requests (each id once): a stream's line may come a moment late.
    logged = [by_id[request_id] for _, request_id in sent]
    assert [(line["status"], line["request_id"]) for line in logged] == sent
    assert by_id["given-0"]["stream"] is True and by_id["given-0"]["ttft_s"] is not None
    assert by_id["given-2"]["upstream_error"] == "status"
    for line in logged:
        assert set(line) == FIELDS
        assert line["ts"].endswith("Z")
    teams = ["alpha", "beta", "alpha", "alpha", "unknown", "alpha", "beta", "alpha", "unknown"]
    assert [line["team"] for line in logged] == teams
    assert [line["model"] for line in logged][3:] == ["unknown"] * 6
    assert [line["status"] for line in logged][6:] == [404, 404, 404]
    assert [line["endpoint"] for line in logged][6:] == ["other"] * 3
    paths = [line["path"] for line in logged]
    assert paths[:3] == ["/v1/chat/completions"] * 3 and paths[5] == "/v1/models"
    assert paths[6] == "/v1/vector_stores/vs_1/files" and paths[8] == "/v1/assistants"
    assert paths[7] == ("/v1/batches" + "/x" * 400)[:256]
    text = log_text()
    for secret in (ALPHA_KEY, BETA_KEY, MADE_UP_KEY, SECRET_PROMPT, "Bearer", "Authorization"):
        assert secret not in text

    # The log and the metrics count the same tokens.
    for kind in ("prompt", "completion"):
        logged_tokens = sum(line[f"{kind}_tokens"] or 0 for line in logged)
        assert logged_tokens == proxy.value("llm_proxy_tokens_total", type=kind) > 0


def test_serve_writes_json_lines_to_stderr(running: Stage, tmp_path: Path) -> None:
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, MODELS, access_log=True)
    with serve(config, 1, tmp_path / "tmp") as served:
        for i in range(3):
            request = urllib.request.Request(
                f"{served.url}/models",
                headers={"Authorization": f"Bearer {ALPHA_KEY}", "X-Request-Id": f"cli-{i}"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200
        scrape(served.root + "/metrics")

        def logged() -> list[dict[str, Any]]:
            return [orjson.loads(line) for line in served.lines if line.startswith("{")]

        wait_for(lambda: len(logged()) == 3, "three access log lines")
    assert [line["request_id"] for line in logged()] == ["cli-0", "cli-1", "cli-2"]
    assert all(line["endpoint"] == "models" and line["status"] == 200 for line in logged())


def test_times_are_finer_than_the_event_loop_s_clock(running: Stage, tmp_path: Path) -> None:
    """Under uvloop (what serve runs on), loop.time() is in whole milliseconds and fixed for a
    loop turn: durations, waits and overheads measured on it came out 0.0 or 0.001."""
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, MODELS, access_log=True)
    with serve(config, 1, tmp_path / "tmp") as served:
        for i in range(12):
            body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}]}
            if i % 3 == 0:
                body["stream"] = True
            request = urllib.request.Request(
                f"{served.url}/chat/completions",
                data=orjson.dumps(body),
                headers={
                    "Authorization": f"Bearer {ALPHA_KEY}",
                    "Content-Type": "application/json",
                },
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200
                response.read()

        def logged() -> list[dict[str, Any]]:
            return [orjson.loads(line) for line in served.lines if '"request_id"' in line]

        wait_for(lambda: len(logged()) == 12, "twelve access log lines")
    lines = logged()
    for line in lines:
        assert line["duration_s"] > 0 and line["upstream_s"] > 0 and line["overhead_s"] > 0
        assert line["duration_s"] >= line["upstream_s"] + line["overhead_s"] - 2e-6  # rounding
        if line["stream"]:
            assert 0 < line["ttft_s"] <= line["duration_s"]
    # Microseconds, not whole milliseconds (twelve multiples of 1 ms by chance: about 1e-36).
    assert any(round(line["duration_s"] * 1e6) % 1000 for line in lines)
    assert any(round(line["overhead_s"] * 1e6) % 1000 for line in lines)


def test_workers_sharing_stderr_never_cut_a_line(running: Stage, tmp_path: Path) -> None:
    """Two workers, one stderr pipe, hundreds of lines at once: every line arrives whole."""
    config = write_config(tmp_path / "proxy.yaml", running.emulator_url, MODELS, access_log=True)
    count = 600
    with serve(config, 2, tmp_path / "tmp") as served:

        async def load() -> None:
            headers = {"Authorization": f"Bearer {ALPHA_KEY}"}
            async with aiohttp.ClientSession(headers=headers) as session:

                async def one(i: int) -> None:
                    async with session.get(
                        f"{served.url}/models", headers={"X-Request-Id": f"many-{i}"}
                    ) as response:
                        assert response.status == 200
                        await response.read()

                for start in range(0, count, 64):
                    await asyncio.gather(*(one(i) for i in range(start, min(start + 64, count))))

        asyncio.run(load())

        def logged() -> list[str]:
            return [line for line in served.lines if '"request_id"' in line]

        wait_for(lambda: len(logged()) >= count, f"{count} access log lines")
    ids = sorted(orjson.loads(line)["request_id"] for line in logged())
    assert ids == sorted(f"many-{i}" for i in range(count))


def test_responses_and_embeddings_are_logged_under_their_endpoints(tmp_path: Path) -> None:
    with stage(recordings(tmp_path / "recordings")) as emulator:
        models = {
            "gpt": {"provider": "emu", "model": "openai"},
            "embed": {"provider": "emu", "model": "contract.openai.embeddings.json"},
        }
        config = write_config(
            tmp_path / "proxy.yaml", emulator.emulator_url, models, access_log=True
        )
        with (
            serve(config, 1, tmp_path / "tmp") as served,
            openai.OpenAI(base_url=served.url, api_key=ALPHA_KEY, max_retries=0) as client,
        ):
            client.responses.create(model="gpt", input="Hello")
            client.embeddings.create(model="embed", input="Hello")
            scrape(served.root + "/metrics")

            def logged() -> list[dict[str, Any]]:
                return [orjson.loads(line) for line in served.lines if line.startswith("{")]

            wait_for(lambda: len(logged()) == 2, "two access log lines")
    responses, embeddings = logged()
    assert (responses["endpoint"], responses["path"]) == ("responses", "/v1/responses")
    assert (embeddings["endpoint"], embeddings["path"]) == ("embeddings", "/v1/embeddings")
    assert responses["team"] == embeddings["team"] == "alpha"
    assert responses["completion_tokens"] > 0 and responses["usage_source"] == "upstream"
    assert embeddings["prompt_tokens"] > 0 and embeddings["completion_tokens"] == 0
