"""The load generator's HTTP client against a raw socket server: each body framing, split lines."""

import asyncio
import json

import pytest

from bench.sse_client import HTTPStreamError, StreamingPost


async def serve_once(response: bytes) -> tuple[asyncio.Server, str, list[bytes]]:
    """A server on loopback that answers one request with `response` (bytes as sent) and
    records the request it got."""
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        received.append(head + await reader.readexactly(length))
        writer.write(response)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", received


async def lines_of(response: bytes) -> tuple[int, list[str], list[bytes]]:
    server, url, received = await serve_once(response)
    async with server, StreamingPost(url, "/v1/x", {"a": 1}, {"x-key": "k"}) as answer:
        lines = [line async for line in answer.lines()]
    return answer.status, lines, received


def test_a_chunked_body_is_joined_across_chunks_and_split_into_lines():
    chunks = [b'data: {"a"', b": 1}\r\n\r\nda", b"ta: [DONE]\n\n"]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    response = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    status, lines, received = asyncio.run(lines_of(response))
    assert status == 200
    assert lines == ['data: {"a": 1}', "", "data: [DONE]", ""]
    request = received[0]
    assert request.startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert b"\r\nx-key: k\r\n" in request
    assert json.loads(request.split(b"\r\n\r\n", 1)[1]) == {"a": 1}


def test_content_length_and_close_delimited_bodies():
    framed = b'HTTP/1.1 400 Bad\r\nContent-Length: 13\r\n\r\n{"error": 12}'
    assert asyncio.run(lines_of(framed))[:2] == (400, ['{"error": 12}'])
    unframed = b"HTTP/1.1 200 OK\r\n\r\nline one\nline two"
    assert asyncio.run(lines_of(unframed))[1] == ["line one", "line two"]


def test_a_connection_cut_inside_a_chunked_body_is_an_error():
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"
    with pytest.raises((HTTPStreamError, asyncio.IncompleteReadError)):
        asyncio.run(lines_of(cut))


def test_a_reply_that_is_not_http_is_an_error():
    with pytest.raises(HTTPStreamError, match="not an HTTP response"):
        asyncio.run(lines_of(b"SSH-2.0-OpenSSH\r\n"))
