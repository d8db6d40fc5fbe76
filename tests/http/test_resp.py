"""RESP2 as ``proxy.http.limits.resp`` writes and reads it: every reply kind, whole and fed byte by
byte (a reply split anywhere must wait for the rest), and the Redis URLs it takes."""

from __future__ import annotations

import pytest

from proxy.http.limits.resp import (
    Address,
    Incomplete,
    ProtocolError,
    ReplyError,
    address,
    pack,
    pack_args,
    pack_texts,
    parse,
)

REPLIES = [
    (b"+OK\r\n", b"OK"),
    (b"-NOSCRIPT No matching script\r\n", ReplyError("NOSCRIPT No matching script")),
    (b":42\r\n", 42),
    (b":-1\r\n", -1),
    (b"$5\r\nhello\r\n", b"hello"),
    (b"$0\r\n\r\n", b""),
    (b"$-1\r\n", None),
    (b"$4\r\na\r\nb\r\n", b"a\r\nb"),  # a bulk string may hold CRLF
    (b"*-1\r\n", None),
    (b"*0\r\n", []),
    (b"*3\r\n:1\r\n:0\r\n$2\r\n17\r\n", [1, 0, b"17"]),
    (b"*2\r\n*1\r\n:1\r\n$-1\r\n", [[1], None]),
    (b"*3\r\n:-5\r\n:0\r\n:12345678901234\r\n", [-5, 0, 12345678901234]),  # RESERVE's
]


def same(a: object, b: object) -> bool:
    if isinstance(a, ReplyError) and isinstance(b, ReplyError):
        return str(a) == str(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize(("wire", "expected"), REPLIES)
def test_a_reply_whole_and_byte_by_byte(wire: bytes, expected: object) -> None:
    reply, end = parse(wire + b":7\r\n", 0)
    assert same(reply, expected) and end == len(wire)
    for cut in range(len(wire)):
        with pytest.raises(Incomplete):
            parse(wire[:cut], 0)


def test_a_reply_that_is_not_resp2_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        parse(b"%2\r\n", 0)  # a RESP3 map: never asked for
    with pytest.raises(ValueError):
        parse(b":twelve\r\n", 0)


def test_commands_are_arrays_of_bulk_strings() -> None:
    assert pack(["EVALSHA", "ab", 2, "k", 1.5, b"\xff"]) == (
        b"*6\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$1\r\nk\r\n$3\r\n1.5\r\n$1\r\n\xff\r\n"
    )
    assert pack(["SET", "ключ", "v"]).startswith(b"*3\r\n$3\r\nSET\r\n$8\r\n")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6380/2", Address("127.0.0.1", 6380, None, False, None, None, 2)),
        ("redis://cache", Address("cache", 6379, None, False, None, None, 0)),
        ("redis://:p%40ss@cache/0", Address("cache", 6379, None, False, None, "p@ss", 0)),
        ("rediss://app:pw@cache:6390", Address("cache", 6390, None, True, "app", "pw", 0)),
        ("unix:///run/redis.sock?db=3", Address(None, 0, "/run/redis.sock", False, None, None, 3)),
    ],
)
def test_redis_urls(url: str, expected: Address) -> None:
    assert address(url) == expected


def test_a_url_of_another_scheme_is_refused() -> None:
    with pytest.raises(ValueError):
        address("http://cache:6379")


@pytest.mark.parametrize("texts", [["1764654321.25", "4106", "0", "ab12", ""], ["é", "ok"], []])
def test_texts_pack_as_any_arguments_do(texts: list[str]) -> None:
    # A length counts bytes: "é" is two of them.
    assert pack_texts(texts) == pack_args(texts)
    assert pack(["EVALSHA", *texts]) == b"*%d\r\n$7\r\nEVALSHA\r\n" % (len(texts) + 1) + pack_texts(
        texts
    )
