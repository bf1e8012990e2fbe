"""sless python runtime: an HTTP server (stdlib only) that wraps the user's handler.

The contract (environment, event, results, errors, job mode) is in runtimes/README.md.
"""
import asyncio
import base64
import collections.abc
import importlib
import inspect
import json
import os
import re
import select
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FuturesTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def _load_env_file():
    """SLESS_ENV_FILE names a JSON object of variables the runner did not put on the container's
    command line (the user's env vars, a job's event): they join the environment before anything
    reads it."""
    path = os.environ.get("SLESS_ENV_FILE")
    if not path:
        return
    try:
        with open(path) as f:
            env = json.load(f)
    except (OSError, ValueError) as e:
        print(f"sless: reading SLESS_ENV_FILE {path}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    for k, v in env.items():
        os.environ[str(k)] = str(v)


_load_env_file()

HANDLER = os.environ.get("HANDLER") or "handler.handle"
FUNCTION_DIR = os.environ.get("FUNCTION_DIR") or "/app/function"
HOST = os.environ.get("HOST") or ""  # all interfaces, as a pod needs; runners on a shared host narrow it
PORT = int(os.environ.get("PORT") or "8080")
TIMEOUT_SEC = float(os.environ.get("TIMEOUT_SEC") or "30")
MAX_BODY_BYTES = int(os.environ.get("MAX_BODY_BYTES") or str(6 * 1024 * 1024))
GRACE_SEC = float(os.environ.get("GRACE_SEC") or "10")
WORKERS = int(os.environ.get("WORKERS") or "64")
TERMINATION_LOG = os.environ.get("TERMINATION_LOG") or "/dev/termination-log"
TERMINATION_LIMIT = 4096


def fail_start(msg):
    print("sless: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def load_handler():
    """Imports the handler at start so a broken function fails fast instead of serving 500s."""
    module_name, _, func_name = HANDLER.rpartition(".")
    if not module_name or not func_name:
        fail_start(f"HANDLER={HANDLER!r} must look like module.function (e.g. handler.handle)")
    sys.path.insert(0, FUNCTION_DIR)
    file_hint = os.path.join(FUNCTION_DIR, *module_name.split(".")) + ".py"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            fail_start(f"cannot load handler {HANDLER!r}: {file_hint} not found")
        traceback.print_exc()
        fail_start(f"cannot load handler {HANDLER!r}: {file_hint}: {type(e).__name__}: {e}")
    except BaseException as e:  # a SyntaxError or anything raised at import time
        traceback.print_exc()
        fail_start(f"cannot load handler {HANDLER!r}: {file_hint}: {type(e).__name__}: {e}")
    fn = getattr(module, func_name, None)
    if not callable(fn):
        fail_start(f"cannot load handler {HANDLER!r}: {file_hint} has no function {func_name!r}")
    return fn


handler = None
_loop = None  # one event loop in its own thread runs every async handler
_pool = None  # worker threads for sync handlers


def _start_loop():
    global _loop, _pool
    _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="handler")
    _loop = asyncio.new_event_loop()
    t = threading.Thread(target=_loop.run_forever, name="async-handlers", daemon=True)
    t.start()


class Timeout(Exception):
    pass


def invoke(event, timeout):
    """Calls the handler, sync or async, giving up after timeout seconds.

    Sync handlers run on a pool of WORKERS threads (reused: no thread start per request). Python
    cannot stop a thread: on timeout a sync handler keeps its worker until it returns (its result is
    discarded); an async handler's task is cancelled.
    """
    if inspect.iscoroutinefunction(handler):
        fut = asyncio.run_coroutine_threadsafe(handler(event), _loop)
        try:
            return fut.result(timeout)
        except FuturesTimeout:
            fut.cancel()
            raise Timeout()
    fut = _pool.submit(_call_sync, event)
    try:
        return fut.result(timeout)
    except FuturesTimeout:
        raise Timeout()


def _call_sync(event):
    try:
        r = handler(event)
        if inspect.isawaitable(r):
            r = asyncio.run_coroutine_threadsafe(_await(r), _loop).result()
        return r
    except BaseException as e:  # reported to the caller with its traceback
        raise HandlerError(e, traceback.format_exc())


async def _await(a):
    return await a


class HandlerError(Exception):
    def __init__(self, err, tb):
        super().__init__(str(err))
        self.err, self.tb = err, tb


def to_event(method, target, headers, body):
    u = urlsplit(target)
    hdrs = {}
    for k, v in headers.items():
        k = k.lower()
        hdrs[k] = hdrs[k] + ", " + v if k in hdrs else v
    event = {
        "method": method,
        "path": u.path,
        "query": parse_qs(u.query, keep_blank_values=True),
        "headers": hdrs,
        "body": None,
        "is_base64_encoded": False,
    }
    if body:
        ctype = hdrs.get("content-type", "").split(";")[0].strip().lower()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["is_base64_encoded"] = True
            return event
        if ctype == "application/json" or ctype.endswith("+json"):
            try:
                event["body"] = json.loads(text)
                return event
            except ValueError:
                pass
        event["body"] = text
    return event


HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def check_headers(headers):
    """Refuses header names that are not HTTP tokens and values with CR, LF or NUL: a handler must
    not be able to inject headers (Set-Cookie) or split the response."""
    for k, v in headers.items():
        if not HEADER_NAME.match(k):
            raise ValueError(f"header name {k!r} is not an HTTP token")
        if any(c in v for c in "\r\n\0"):
            raise ValueError(f"header {k!r} has CR, LF or NUL in its value")
    return headers


def to_response(result):
    """Maps a handler result to (status, headers, body bytes)."""
    if result is None:
        return 204, {}, b""
    if isinstance(result, dict) and "statusCode" in result:
        status = int(result["statusCode"])
        headers = check_headers({str(k): str(v) for k, v in (result.get("headers") or {}).items()})
        body = result.get("body")
        if body is None:
            data = b""
        elif isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif isinstance(body, str):
            data = base64.b64decode(body) if result.get("isBase64Encoded") else body.encode("utf-8")
        else:
            data = json.dumps(body).encode("utf-8")
            headers.setdefault("Content-Type", "application/json")
        return status, headers, data
    if isinstance(result, str):
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, result.encode("utf-8")
    if isinstance(result, (bytes, bytearray)):
        return 200, {"Content-Type": "application/octet-stream"}, bytes(result)
    return 200, {"Content-Type": "application/json"}, json.dumps(result).encode("utf-8")


STREAM_TYPE = "text/plain; charset=utf-8"


def is_stream(x):
    """A generator, an async generator, or any (async) iterator: a streamed body. Strings, bytes,
    lists and dicts are iterable but no iterators: they keep their meaning above."""
    return isinstance(x, (collections.abc.Iterator, collections.abc.AsyncIterator))


def stream_response(result):
    """(status, headers, source) when the handler streams, else None."""
    if is_stream(result):
        return 200, {"Content-Type": STREAM_TYPE}, result
    if isinstance(result, dict) and "statusCode" in result and is_stream(result.get("body")):
        try:
            status = int(result["statusCode"])
            headers = check_headers({str(k): str(v) for k, v in (result.get("headers") or {}).items()})
        except Exception:
            Chunks(result["body"]).close()
            raise
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = STREAM_TYPE
        return status, headers, result["body"]
    return None


def chunk_bytes(c):
    """One streamed chunk as bytes: str as UTF-8, bytes as they are, None nothing, anything else
    as a JSON line (JSON + "\n")."""
    if c is None:
        return b""
    if isinstance(c, str):
        return c.encode("utf-8")
    if isinstance(c, (bytes, bytearray, memoryview)):
        return bytes(c)
    return (json.dumps(c) + "\n").encode("utf-8")


class ClientGone(Exception):
    pass


_END = object()  # the source has no more chunks


def _next_sync(it):
    try:
        return next(it)
    except StopIteration:
        return _END
    except BaseException as e:
        raise HandlerError(e, traceback.format_exc())


class Chunks:
    """Steps a handler's (async) iterator one chunk at a time: a sync one on the worker pool, an
    async one on the event loop, so the request's thread can give up on a step at the deadline or
    when the client goes. close() closes the iterator (GeneratorExit in a generator; an async
    step still running is cancelled first), once the step running, if any, lets it."""

    def __init__(self, it):
        self.it = it
        self.is_async = not hasattr(it, "__next__")
        self.step = None  # the future of the step in progress
        self.task = None  # its task on the event loop (async)
        self.closed = False

    async def _anext(self):
        self.task = asyncio.current_task()
        try:
            return await self.it.__anext__()
        except StopAsyncIteration:
            return _END
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            raise HandlerError(e, traceback.format_exc())

    def next(self, deadline, gone):
        """The next chunk or _END; raises Timeout at deadline (time.monotonic()), ClientGone when
        gone() says the client went while the handler was busy, HandlerError when it raised."""
        if self.is_async:
            self.step = asyncio.run_coroutine_threadsafe(self._anext(), _loop)
        else:
            self.step = _pool.submit(_next_sync, self.it)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout()
            try:
                r = self.step.result(min(remaining, 0.25))
                self.step = None
                return r
            except FuturesTimeout:
                if gone():
                    raise ClientGone()

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self.is_async:
            if _loop is not None:
                asyncio.run_coroutine_threadsafe(self._aclose(), _loop)
            return
        step = self.step
        if step is not None and not step.done():
            # A thread cannot be interrupted: the generator is closed when its step returns.
            step.add_done_callback(lambda f: self._close_sync())
        else:
            _pool.submit(self._close_sync)

    def _close_sync(self):
        close = getattr(self.it, "close", None)
        if close is None:
            return
        try:
            close()
        except BaseException:
            traceback.print_exc()

    async def _aclose(self):
        t = self.task
        if t is not None and not t.done():
            t.cancel()  # the handler sees CancelledError where it awaits
            await asyncio.wait({t}, timeout=GRACE_SEC)
        aclose = getattr(self.it, "aclose", None)
        if aclose is None:
            return
        try:
            await asyncio.wait_for(aclose(), GRACE_SEC)
        except BaseException:
            traceback.print_exc()


def peer_gone(sock):
    """Whether the client closed the connection (readable at EOF, or reset). A client that sent
    more (a pipelined request) is still there."""
    try:
        p = select.poll()  # not select(): it fails on descriptors above 1023
        p.register(sock, select.POLLIN)
        if not p.poll(0):
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True


def error_body(code, message):
    return json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")


class BodyTooLarge(Exception):
    pass


class BadRequest(Exception):
    pass


inflight = 0
inflight_lock = threading.Lock()
inflight_zero = threading.Condition(inflight_lock)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive for the platform's proxy
    # Headers and body go out in two writes; without TCP_NODELAY the second waits ~40 ms for the
    # client's delayed ACK on every keep-alive request.
    disable_nagle_algorithm = True
    server_version = "sless-python"

    def log_message(self, *args):  # one JSON line per request instead (see _log)
        pass

    def _log(self, status, start, stream=None):
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "method": self.command,
                "path": urlsplit(self.path).path, "status": status,
                "duration_ms": round((time.monotonic() - start) * 1000, 3)}
        if stream:
            line["stream"] = stream
        rid = self.headers.get("X-Request-Id")
        if rid:
            line["request_id"] = rid
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    def _send(self, status, headers, data):
        self.send_response(status)
        for k, v in headers.items():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _stream(self, status, headers, chunks, deadline):
        """Sends a streamed response: each chunk as it comes, chunked (HTTP/1.0: until the
        connection closes). Returns how it ended: "complete", "timeout" (the terminating chunk
        follows the last complete one, then the connection closes), "error" (the handler raised:
        the response is aborted, no terminating chunk) or "client_closed" (the handler's iterator
        is closed)."""
        self.send_response(status)
        for k, v in headers.items():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        chunked = self.request_version != "HTTP/1.0"
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        try:
            self.end_headers()
        except OSError:
            self.close_connection = True
            chunks.close()
            return "client_closed"
        if self.command == "HEAD":
            chunks.close()
            return "complete"
        sock = self.connection
        prev = sock.gettimeout()
        end, clean = "complete", True
        try:
            while True:
                try:
                    c = chunks.next(deadline, lambda: peer_gone(sock))
                except Timeout:
                    end = "timeout"
                    break
                except ClientGone:
                    end = "client_closed"
                    break
                except HandlerError as e:
                    sys.stderr.write(e.tb)
                    sys.stderr.flush()
                    end = "error"
                    break
                if c is _END:
                    break
                try:
                    data = chunk_bytes(c)
                except Exception:
                    traceback.print_exc()
                    end = "error"
                    break
                if peer_gone(sock):  # before writing into a connection the client closed
                    end = "client_closed"
                    break
                if not data:
                    continue
                # A client that stops reading cannot hold the thread past the deadline.
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                except socket.timeout:
                    end, clean = "timeout", False  # a chunk may be cut: abort
                    break
                except OSError:
                    end = "client_closed"
                    break
            if end == "complete" or (end == "timeout" and clean):
                if chunked:
                    sock.settimeout(1.0)
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        pass
        finally:
            try:
                sock.settimeout(prev)
            except OSError:
                pass
        if end != "complete":
            self.close_connection = True
            chunks.close()
        return end

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "").lower()
        if "chunked" in te:
            out = bytearray()
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    raise BadRequest("invalid chunk size")
                if size < 0:  # int() takes "-5"; read(-5) would read until the client closes
                    raise BadRequest("negative chunk size")
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                if len(out) + size > MAX_BODY_BYTES:
                    raise BodyTooLarge()
                out += self.rfile.read(size)
                self.rfile.readline(1024)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY_BYTES:
            raise BodyTooLarge()
        return self.rfile.read(n) if n > 0 else b""

    def _handle(self):
        global inflight
        start = time.monotonic()
        if self.path == "/health" and self.command == "GET":
            self._send(200, {"Content-Type": "application/json"}, b'{"status":"ok"}')
            return
        with inflight_lock:
            inflight += 1
        status, stream = 500, None
        try:
            try:
                body = self._read_body()
            except BodyTooLarge:
                status = 413
                self.close_connection = True
                self._send(413, {"Content-Type": "application/json"},
                           error_body("payload_too_large", f"request body exceeds {MAX_BODY_BYTES} bytes"))
                return
            except BadRequest as e:
                status = 400
                self.close_connection = True
                self._send(400, {"Content-Type": "application/json"}, error_body("bad_request", str(e)))
                return
            event = to_event(self.command, self.path, self.headers, body)
            called = time.monotonic()
            streamed = None
            try:
                result = invoke(event, TIMEOUT_SEC)
                streamed = stream_response(result)
                if streamed is None:
                    status, headers, data = to_response(result)
            except Timeout:
                status, headers, data = 504, {"Content-Type": "application/json"}, error_body(
                    "timeout", f"the handler did not finish within {TIMEOUT_SEC:g} s (TIMEOUT_SEC)")
            except HandlerError as e:
                sys.stderr.write(e.tb)
                sys.stderr.flush()
                status, headers, data = 500, {"Content-Type": "application/json"}, error_body(
                    "handler_error", f"{type(e.err).__name__}: {e.err}")
            except Exception as e:  # the result could not be turned into a response
                traceback.print_exc()
                status, headers, data = 500, {"Content-Type": "application/json"}, error_body(
                    "handler_error", f"invalid handler result: {type(e).__name__}: {e}")
            if streamed is not None:
                status, headers, source = streamed
                stream = "started"
                stream = self._stream(status, headers, Chunks(source), called + TIMEOUT_SEC)
                return
            self._send(status, headers, data)
        finally:
            self._log(status, start, stream)
            with inflight_lock:
                inflight -= 1
                if inflight == 0:
                    inflight_zero.notify_all()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


def write_termination(text):
    try:
        with open(TERMINATION_LOG, "w") as f:
            f.write(text.encode("utf-8")[:TERMINATION_LIMIT].decode("utf-8", "ignore"))
    except OSError:
        pass  # not on Kubernetes, or not writable: stdout carries the result anyway


def cron_scheduled_time(event):
    """A cron run on Kubernetes: the CronJob's template cannot carry the scheduled time, but the
    name of the Job made for this run (SLESS_CRON_JOB, "<cronjob>-<minutes since the epoch>") does."""
    job = os.environ.get("SLESS_CRON_JOB") or ""
    if not isinstance(event, dict) or event.get("source") != "cron" or "scheduled_time" in event:
        return event
    minutes = job.rsplit("-", 1)[-1]
    if "-" in job and minutes.isdigit() and int(minutes) > 0:
        t = time.gmtime(int(minutes) * 60)
        event["scheduled_time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", t)
    return event


def job_mode():
    """Calls the handler once with EVENT_JSON (the event itself) and exits: FunctionJob and cron."""
    try:
        event = cron_scheduled_time(json.loads(os.environ.get("EVENT_JSON") or "{}"))
    except ValueError as e:
        print(f"sless: EVENT_JSON is not valid JSON: {e}", file=sys.stderr)
        write_termination(json.dumps({"error": f"EVENT_JSON is not valid JSON: {e}"}))
        sys.exit(1)
    try:
        result = invoke(event, TIMEOUT_SEC)
    except Timeout:
        msg = f"the handler did not finish within {TIMEOUT_SEC:g} s (TIMEOUT_SEC)"
        print("sless: " + msg, file=sys.stderr, flush=True)
        write_termination(json.dumps({"error": msg}))
        os._exit(1)
    except HandlerError as e:
        sys.stderr.write(e.tb)
        print(f"sless: handler failed: {type(e.err).__name__}: {e.err}", file=sys.stderr, flush=True)
        write_termination(json.dumps({"error": f"{type(e.err).__name__}: {e.err}"}))
        sys.exit(1)
    try:
        out = json.dumps(result)
    except TypeError:
        out = json.dumps(str(result))
    print(out, flush=True)
    write_termination(out)
    sys.exit(0)


def main():
    global handler
    handler = load_handler()
    _start_loop()
    if os.environ.get("JOB_MODE") in ("1", "true"):
        job_mode()
    # socketserver's default listen backlog is 5: a burst of new connections would be refused.
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer((HOST, PORT), Handler)
    server.daemon_threads = True
    stopping = threading.Event()

    def on_term(signum, frame):
        if stopping.is_set():
            return
        stopping.set()
        # shutdown() waits for serve_forever, which runs in this (the main) thread: call it elsewhere.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print(json.dumps({"msg": "listening", "port": PORT, "handler": HANDLER}), flush=True)
    server.serve_forever(poll_interval=0.2)
    server.socket.close()  # stop accepting at once; in-flight requests finish below
    deadline = time.monotonic() + GRACE_SEC
    with inflight_lock:
        while inflight > 0 and time.monotonic() < deadline:
            inflight_zero.wait(max(0.0, deadline - time.monotonic()))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
