'use strict';
// sless node runtime: an HTTP server (node's http module only) that wraps the user's handler.
// The contract (environment, event, results, errors, job mode) is in runtimes/README.md.
const http = require('http');
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

// SLESS_ENV_FILE names a JSON object of variables the runner did not put on the container's command
// line (the user's env vars, a job's event): they join the environment before anything reads it.
(function loadEnvFile() {
  const file = process.env.SLESS_ENV_FILE;
  if (!file) return;
  let env;
  try {
    env = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    process.stderr.write(`sless: reading SLESS_ENV_FILE ${file}: ${e.message}\n`);
    process.exit(1);
  }
  for (const [k, v] of Object.entries(env)) process.env[k] = String(v);
})();

const HANDLER = process.env.HANDLER || 'handler.handle';
const FUNCTION_DIR = process.env.FUNCTION_DIR || '/app/function';
const HOST = process.env.HOST || undefined; // all interfaces, as a pod needs; runners on a shared host narrow it
const PORT = parseInt(process.env.PORT || '8080', 10);
const TIMEOUT_SEC = parseFloat(process.env.TIMEOUT_SEC || '30');
const MAX_BODY_BYTES = parseInt(process.env.MAX_BODY_BYTES || String(6 * 1024 * 1024), 10);
const GRACE_SEC = parseFloat(process.env.GRACE_SEC || '10');
const TERMINATION_LOG = process.env.TERMINATION_LOG || '/dev/termination-log';
const TERMINATION_LIMIT = 4096;

function failStart(msg) {
  process.stderr.write('sless: ' + msg + '\n');
  process.exit(1);
}

// The handler is loaded at start so a broken function fails fast instead of serving 500s.
async function loadHandler() {
  const dot = HANDLER.lastIndexOf('.');
  if (dot <= 0 || dot === HANDLER.length - 1) {
    failStart(`HANDLER=${JSON.stringify(HANDLER)} must look like file.export (e.g. handler.handle)`);
  }
  const file = HANDLER.slice(0, dot);
  const name = HANDLER.slice(dot + 1);
  const base = path.resolve(FUNCTION_DIR, file);
  const found = [base + '.js', base + '.mjs', base + '.cjs', base].find(
    (p) => fs.existsSync(p) && fs.statSync(p).isFile());
  if (!found) failStart(`cannot load handler '${HANDLER}': ${base}.js not found`);
  let mod;
  try {
    mod = await import(pathToFileURL(found).href);
  } catch (e) {
    process.stderr.write(String((e && e.stack) || e) + '\n');
    failStart(`cannot load handler '${HANDLER}': ${found}: ${e}`);
  }
  let fn = mod[name];
  if (typeof fn !== 'function' && mod.default) fn = mod.default[name];
  if (typeof fn !== 'function') failStart(`cannot load handler '${HANDLER}': ${found} has no exported function '${name}'`);
  return fn;
}

class Timeout extends Error {}

// invoke calls the handler (sync or async) and gives up after the timeout. A handler that keeps the
// event loop busy cannot be interrupted; an async one keeps running after the 504, its result dropped.
function invoke(handler, event) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Timeout()), TIMEOUT_SEC * 1000);
  });
  const call = new Promise((resolve) => resolve(handler(event)));
  return Promise.race([call, timeout]).finally(() => clearTimeout(timer));
}

function toEvent(req, body) {
  const u = new URL(req.url, 'http://function');
  const query = {};
  for (const [k, v] of u.searchParams) (query[k] = query[k] || []).push(v);
  const headers = {};
  for (const [k, v] of Object.entries(req.headers)) headers[k] = Array.isArray(v) ? v.join(', ') : v;
  const event = { method: req.method, path: u.pathname, query, headers, body: null, is_base64_encoded: false };
  if (body.length > 0) {
    const ctype = (headers['content-type'] || '').split(';')[0].trim().toLowerCase();
    const text = new TextDecoder('utf-8', { fatal: true });
    let s;
    try {
      s = text.decode(body);
    } catch {
      event.body = body.toString('base64');
      event.is_base64_encoded = true;
      return event;
    }
    if (ctype === 'application/json' || ctype.endsWith('+json')) {
      try {
        event.body = JSON.parse(s);
        return event;
      } catch { /* not JSON after all: pass the text */ }
    }
    event.body = s;
  }
  return event;
}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

// checkHeaders refuses header names that are not HTTP tokens and values with CR, LF or NUL: a
// handler must not be able to inject headers (Set-Cookie) or split the response.
function checkHeaders(headers) {
  for (const [k, v] of Object.entries(headers)) {
    if (!HEADER_NAME.test(k)) throw new Error(`header name ${JSON.stringify(k)} is not an HTTP token`);
    if (/[\r\n\0]/.test(String(v))) throw new Error(`header ${JSON.stringify(k)} has CR, LF or NUL in its value`);
  }
  return headers;
}

function toResponse(result) {
  if (result === undefined || result === null) return [204, {}, Buffer.alloc(0)];
  if (typeof result === 'object' && !Buffer.isBuffer(result) && 'statusCode' in result) {
    const headers = checkHeaders({ ...(result.headers || {}) });
    let body = result.body;
    let data;
    if (body === undefined || body === null) data = Buffer.alloc(0);
    else if (Buffer.isBuffer(body)) data = body;
    else if (typeof body === 'string') data = Buffer.from(body, result.isBase64Encoded ? 'base64' : 'utf8');
    else {
      data = Buffer.from(JSON.stringify(body));
      if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) headers['Content-Type'] = 'application/json';
    }
    return [Number(result.statusCode), headers, data];
  }
  if (typeof result === 'string') return [200, { 'Content-Type': 'text/plain; charset=utf-8' }, Buffer.from(result)];
  if (Buffer.isBuffer(result)) return [200, { 'Content-Type': 'application/octet-stream' }, result];
  return [200, { 'Content-Type': 'application/json' }, Buffer.from(JSON.stringify(result))];
}

const STREAM_TYPE = 'text/plain; charset=utf-8';

// isStream: an async iterable (an async generator, a Node Readable), a web ReadableStream, or a
// (sync) iterator such as a generator. Strings, Buffers and arrays are iterable but no iterators:
// they keep their meaning above.
function isStream(x) {
  if (x === null || typeof x !== 'object' || Buffer.isBuffer(x) || ArrayBuffer.isView(x)) return false;
  if (typeof x[Symbol.asyncIterator] === 'function' || typeof x.getReader === 'function') return true;
  return typeof x[Symbol.iterator] === 'function' && typeof x.next === 'function';
}

// streamResponse is [status, headers, source] when the handler streams, else null.
function streamResponse(result) {
  if (isStream(result)) return [200, { 'Content-Type': STREAM_TYPE }, result];
  if (result !== null && typeof result === 'object' && 'statusCode' in result && isStream(result.body)) {
    let headers;
    try {
      headers = checkHeaders({ ...(result.headers || {}) });
    } catch (e) {
      chunksOf(result.body).close();
      throw e;
    }
    if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) headers['Content-Type'] = STREAM_TYPE;
    return [Number(result.statusCode), headers, result.body];
  }
  return null;
}

// chunksOf steps a source one chunk at a time: next() resolves {done, value}; close() ends it (an
// iterator's return(): the generator's finally runs; a stream is cancelled or destroyed).
function chunksOf(src) {
  let closed = false;
  let next, close;
  if (typeof src.getReader === 'function' && typeof src.cancel === 'function') {
    const reader = src.getReader();
    next = () => reader.read();
    close = () => reader.cancel();
  } else {
    const it = typeof src[Symbol.asyncIterator] === 'function' ? src[Symbol.asyncIterator]() : src;
    next = () => it.next();
    close = () => (typeof it.return === 'function' ? it.return() : undefined);
  }
  return {
    next: () => new Promise((resolve) => resolve(next())),
    close: () => {
      if (closed) return;
      closed = true;
      new Promise((resolve) => resolve(close())).catch((e) => process.stderr.write(String((e && e.stack) || e) + '\n'));
    },
  };
}

// chunkBytes is one streamed chunk as bytes: a string as UTF-8, bytes as they are, null or
// undefined nothing, anything else as a JSON line (JSON + "\n").
function chunkBytes(c) {
  if (c === undefined || c === null) return Buffer.alloc(0);
  if (typeof c === 'string') return Buffer.from(c, 'utf8');
  if (Buffer.isBuffer(c)) return c;
  if (ArrayBuffer.isView(c)) return Buffer.from(c.buffer, c.byteOffset, c.byteLength);
  if (c instanceof ArrayBuffer) return Buffer.from(c);
  const s = JSON.stringify(c);
  if (s === undefined) throw new TypeError(`cannot send a chunk of type ${typeof c}`);
  return Buffer.from(s + '\n');
}

// stream sends a streamed response: each chunk as it comes, chunked. It resolves how it ended:
// "complete"; "timeout" at the deadline (the terminating chunk follows the last complete one, then
// the connection closes); "error" (the handler threw: the response is aborted, no terminating
// chunk); "client_closed" (the source is closed). No timer or listener outlives it.
async function stream(req, res, status, headers, source, deadline) {
  const chunks = chunksOf(source);
  for (const k of Object.keys(headers)) {
    if (['content-length', 'transfer-encoding', 'connection'].includes(k.toLowerCase())) delete headers[k];
  }
  if (stopping) headers['Connection'] = 'close';
  const sock = req.socket;
  let wake;
  const stop = new Promise((resolve) => { wake = resolve; });
  const timer = setTimeout(() => wake('timeout'), Math.max(deadline - Date.now(), 0));
  const onClose = () => wake('client_closed');
  res.on('close', onClose);
  let end = 'complete';
  let clean = true;
  // Settles once the last chunk has reached the socket: an abort must not drop it (Node 24 still
  // holds a chunk written in the same tick when the socket is ended).
  let written = Promise.resolve();
  try {
    res.writeHead(status, headers);
    if (req.method === 'HEAD') {
      chunks.close();
      res.end();
      return end;
    }
    res.flushHeaders();
    for (;;) {
      const step = chunks.next();
      step.catch(() => {}); // settled after a timeout or a disconnect: nobody waits for it then
      let r;
      try {
        r = await Promise.race([step, stop]);
      } catch (e) {
        process.stderr.write(String((e && e.stack) || e) + '\n');
        end = 'error';
        break;
      }
      if (typeof r === 'string') {
        end = r;
        break;
      }
      if (r.done) break;
      let data;
      try {
        data = chunkBytes(r.value);
      } catch (e) {
        process.stderr.write(String((e && e.stack) || e) + '\n');
        end = 'error';
        break;
      }
      if (data.length === 0) continue;
      let ok;
      written = new Promise((resolve) => { ok = res.write(data, () => resolve()); });
      if (!ok) {
        // The client reads slower than the handler writes: wait, but not past the deadline.
        let onDrain;
        const drained = new Promise((resolve) => { onDrain = () => resolve('drained'); });
        res.once('drain', onDrain);
        const w = await Promise.race([drained, stop]);
        res.removeListener('drain', onDrain);
        if (w !== 'drained') {
          end = w;
          clean = false;
          break;
        }
      }
    }
  } finally {
    clearTimeout(timer);
    res.removeListener('close', onClose);
  }
  if (end === 'complete') {
    res.end();
  } else if (end === 'timeout' && clean) {
    chunks.close();
    res.end(() => sock.end());
  } else if (end === 'error') {
    // Abort: what was written goes out (end() uncorks the socket), the terminating chunk does not.
    chunks.close();
    await Promise.race([written, new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
    sock.end();
    sock.setTimeout(1000, () => sock.destroy());
  } else {
    chunks.close();
    res.destroy();
  }
  return end;
}

function errorBody(code, message) {
  return Buffer.from(JSON.stringify({ error: { code, message } }));
}

let stopping = false;

function send(res, status, headers, data) {
  for (const k of Object.keys(headers)) {
    if (['content-length', 'transfer-encoding', 'connection'].includes(k.toLowerCase())) delete headers[k];
  }
  headers['Content-Length'] = data.length;
  // While stopping, close each connection after its response so server.close() can complete.
  if (stopping) headers['Connection'] = 'close';
  res.writeHead(status, headers);
  res.end(res.req.method === 'HEAD' ? undefined : data);
}

function log(req, status, start, streamEnd) {
  const line = {
    time: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    method: req.method,
    path: new URL(req.url, 'http://function').pathname,
    status,
    duration_ms: Math.round(Number(process.hrtime.bigint() - start) / 1000) / 1000,
  };
  if (streamEnd) line.stream = streamEnd;
  if (req.headers['x-request-id']) line.request_id = req.headers['x-request-id'];
  process.stdout.write(JSON.stringify(line) + '\n');
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const declared = parseInt(req.headers['content-length'] || '0', 10);
    if (declared > MAX_BODY_BYTES) return reject(new Error('too large'));
    const chunks = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n > MAX_BODY_BYTES) {
        req.pause();
        reject(new Error('too large'));
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function writeTermination(text) {
  try {
    fs.writeFileSync(TERMINATION_LOG, Buffer.from(text).subarray(0, TERMINATION_LIMIT));
  } catch { /* not on Kubernetes, or not writable: stdout carries the result anyway */ }
}

// A cron run on Kubernetes: the CronJob's template cannot carry the scheduled time, but the name of
// the Job made for this run (SLESS_CRON_JOB, "<cronjob>-<minutes since the epoch>") does.
function cronScheduledTime(event) {
  const job = process.env.SLESS_CRON_JOB || '';
  if (!event || typeof event !== 'object' || Array.isArray(event) || event.source !== 'cron' || 'scheduled_time' in event) return event;
  const i = job.lastIndexOf('-');
  const minutes = job.slice(i + 1);
  if (i >= 0 && /^[0-9]+$/.test(minutes) && Number(minutes) > 0) {
    event.scheduled_time = new Date(Number(minutes) * 60000).toISOString().replace('.000Z', 'Z');
  }
  return event;
}

// Job mode: call the handler once with EVENT_JSON (the event itself), print the result, exit.
async function jobMode(handler) {
  let event;
  try {
    event = cronScheduledTime(JSON.parse(process.env.EVENT_JSON || '{}'));
  } catch (e) {
    process.stderr.write(`sless: EVENT_JSON is not valid JSON: ${e.message}\n`);
    writeTermination(JSON.stringify({ error: `EVENT_JSON is not valid JSON: ${e.message}` }));
    process.exit(1);
  }
  try {
    const result = await invoke(handler, event);
    const out = JSON.stringify(result === undefined ? null : result);
    process.stdout.write(out + '\n', () => {
      writeTermination(out);
      process.exit(0);
    });
  } catch (e) {
    const msg = e instanceof Timeout ? `the handler did not finish within ${TIMEOUT_SEC} s (TIMEOUT_SEC)` : String(e);
    process.stderr.write(String((e && !(e instanceof Timeout) && e.stack) || '') + '\nsless: handler failed: ' + msg + '\n');
    writeTermination(JSON.stringify({ error: msg }));
    process.exit(1);
  }
}

async function main() {
  const handler = await loadHandler();
  if (process.env.JOB_MODE === '1' || process.env.JOB_MODE === 'true') return jobMode(handler);

  const server = http.createServer({ noDelay: true }, async (req, res) => {
    const start = process.hrtime.bigint();
    if (req.method === 'GET' && req.url === '/health') {
      send(res, 200, { 'Content-Type': 'application/json' }, Buffer.from('{"status":"ok"}'));
      return;
    }
    let status = 500;
    let streamEnd;
    try {
      let body;
      try {
        body = await readBody(req);
      } catch {
        status = 413;
        res.setHeader('Connection', 'close');
        send(res, 413, { 'Content-Type': 'application/json' }, errorBody('payload_too_large', `request body exceeds ${MAX_BODY_BYTES} bytes`));
        res.on('finish', () => req.destroy());
        return;
      }
      let headers, data, streamed;
      const called = Date.now();
      try {
        const result = await invoke(handler, toEvent(req, body));
        streamed = streamResponse(result);
        if (!streamed) [status, headers, data] = toResponse(result);
      } catch (e) {
        if (e instanceof Timeout) {
          [status, headers, data] = [504, { 'Content-Type': 'application/json' }, errorBody('timeout', `the handler did not finish within ${TIMEOUT_SEC} s (TIMEOUT_SEC)`)];
        } else {
          process.stderr.write(String((e && e.stack) || e) + '\n');
          [status, headers, data] = [500, { 'Content-Type': 'application/json' }, errorBody('handler_error', String((e && e.message) || e))];
        }
      }
      if (streamed) {
        [status, headers] = streamed;
        streamEnd = 'started';
        streamEnd = await stream(req, res, status, headers, streamed[2], called + TIMEOUT_SEC * 1000);
        return;
      }
      send(res, status, headers, data);
    } finally {
      log(req, status, start, streamEnd);
    }
  });
  server.keepAliveTimeout = 65000;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    // Stop accepting; exit once every connection has closed (in-flight requests finish first).
    server.close(() => process.exit(0));
    server.closeIdleConnections();
    setTimeout(() => process.exit(0), GRACE_SEC * 1000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  server.listen(PORT, HOST, () => {
    process.stdout.write(JSON.stringify({ msg: 'listening', port: PORT, handler: HANDLER }) + '\n');
  });
}

main();
