"""Streaming handlers for the conformance suite: handle returns generators, handle_async (an async
handler) async generators, for the same paths."""
import asyncio
import time


def _marker(event, how):
    """Writes how the stream was closed to the file the test named (?marker=)."""
    path = event["query"].get("marker", [""])[0]
    if path:
        with open(path, "w") as f:
            f.write(how)


def handle(event):
    p = event["path"]
    if p == "/yield":
        def gen():
            yield "first\n"
            time.sleep(1)
            yield "second\n"
        return gen()
    if p == "/types":
        def gen():
            yield "str\n"
            yield b"bytes\n"
            yield {"k": 1}
            yield None
            yield ""
            yield bytearray(b"end\n")
        return gen()
    if p == "/sse":
        def gen():
            yield "data: 0\n\n"
            time.sleep(0.5)
            yield "data: 1\n\n"
        return {"statusCode": 201, "headers": {"Content-Type": "text/event-stream", "X-Custom": "yes"}, "body": gen()}
    if p == "/raise":
        def gen():
            yield "first\n"
            raise ValueError("midstream boom")
        return gen()
    if p in ("/forever", "/disconnect"):
        def gen():
            how = "finished"
            try:
                yield "first\n"
                while True:
                    time.sleep(0.2)
                    yield "tick\n"
            except GeneratorExit:
                how = "GeneratorExit"
                raise
            finally:
                _marker(event, how)
        return gen()
    return "ok"


async def handle_async(event):
    p = event["path"]
    if p == "/yield":
        async def gen():
            yield "first\n"
            await asyncio.sleep(1)
            yield "second\n"
        return gen()
    if p == "/types":
        async def gen():
            for c in ("str\n", b"bytes\n", {"k": 1}, None, "", bytearray(b"end\n")):
                yield c
        return gen()
    if p == "/sse":
        async def gen():
            yield "data: 0\n\n"
            await asyncio.sleep(0.5)
            yield "data: 1\n\n"
        return {"statusCode": 201, "headers": {"Content-Type": "text/event-stream", "X-Custom": "yes"}, "body": gen()}
    if p == "/raise":
        async def gen():
            yield "first\n"
            raise ValueError("midstream boom")
        return gen()
    if p in ("/forever", "/disconnect"):
        async def gen():
            how = "finished"
            try:
                yield "first\n"
                while True:
                    await asyncio.sleep(0.2)
                    yield "tick\n"
            except (GeneratorExit, asyncio.CancelledError) as e:
                how = type(e).__name__
                raise
            finally:
                _marker(event, how)
        return gen()
    return "ok"


async def agen(event):
    """An async generator function as the handler itself."""
    if event["path"] != "/yield":
        yield "ok"
        return
    yield "first\n"
    await asyncio.sleep(1)
    yield "second\n"
