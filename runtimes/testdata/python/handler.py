import asyncio
import sys
import time


def handle(event):
    p = event["path"]
    if p == "/echo":
        return {"event": event}
    if p == "/status":
        return {"statusCode": 201, "headers": {"X-Custom": "yes", "Content-Type": "text/plain"}, "body": "created"}
    if p == "/crlf":
        return {"statusCode": 200, "headers": {"X-Evil": "a\r\nSet-Cookie: pwned=1"}, "body": "x"}
    if p == "/badname":
        return {"statusCode": 200, "headers": {"Bad Name": "v"}, "body": "x"}
    if p == "/none":
        return None
    if p == "/text":
        return "plain text"
    if p == "/raise":
        raise ValueError("boom")
    if p == "/slow":
        print("slow: started", file=sys.stderr, flush=True)
        time.sleep(float(event["query"].get("s", ["5"])[0]))
        return {"slept": True}
    if p == "/binary":
        return {"statusCode": 200, "headers": {"Content-Type": "application/octet-stream"}, "body": "AAEC/w==", "isBase64Encoded": True}
    return {"path": p}


async def handle_async(event):
    if event["path"] == "/slow":
        print("slow: started", file=sys.stderr, flush=True)
        await asyncio.sleep(float(event["query"].get("s", ["5"])[0]))
        return {"slept": True}
    await asyncio.sleep(0)
    return handle(event)


def job(event):
    return {"sum": sum(event["input"])}


def job_fail(event):
    raise RuntimeError("job failed on purpose")


def echo_event(event):
    return event
