// Streaming handlers for the conformance suite: handle returns async generators, handleWeb web
// ReadableStreams, handleReadable Node Readable streams, for the same paths.
const fs = require('fs');
const { Readable } = require('stream');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// marker writes how the stream was closed to the file the test named (?marker=).
function marker(event, how) {
  const p = (event.query.marker || [''])[0];
  if (p) fs.writeFileSync(p, how);
}

function source(event) {
  switch (event.path) {
    case '/yield':
      return (async function* () {
        yield 'first\n';
        await sleep(1000);
        yield 'second\n';
      })();
    case '/types':
      return (async function* () {
        yield 'str\n';
        yield Buffer.from('bytes\n');
        yield { k: 1 };
        yield null;
        yield '';
        yield new TextEncoder().encode('end\n');
      })();
    case '/sse':
      return (async function* () {
        yield 'data: 0\n\n';
        await sleep(500);
        yield 'data: 1\n\n';
      })();
    case '/raise':
      return (async function* () {
        yield 'first\n';
        throw new Error('midstream boom');
      })();
    case '/forever':
    case '/disconnect':
      return (async function* () {
        let how = 'return';
        try {
          yield 'first\n';
          for (;;) {
            await sleep(200);
            yield 'tick\n';
          }
        } catch (e) {
          how = 'threw ' + e;
          throw e;
        } finally {
          marker(event, how);
        }
      })();
    default:
      return null;
  }
}

function respond(event, wrap) {
  const src = source(event);
  if (!src) return 'ok';
  if (event.path === '/sse') return { statusCode: 201, headers: { 'Content-Type': 'text/event-stream', 'X-Custom': 'yes' }, body: wrap(src) };
  return wrap(src);
}

exports.handle = async (event) => respond(event, (it) => it);

// A web ReadableStream pulling from the generator; cancelling it returns the generator.
exports.handleWeb = async (event) => respond(event, (it) => new ReadableStream({
  async pull(controller) {
    const { done, value } = await it.next();
    if (done) controller.close();
    else controller.enqueue(typeof value === 'string' ? new TextEncoder().encode(value) : value);
  },
  async cancel() {
    await it.return();
  },
}));

// A Node Readable (an async iterable itself); destroying it returns the generator.
// (null ends a Readable: /types' null chunk is left out.)
exports.handleReadable = async (event) => respond(event, (it) => Readable.from((async function* () {
  for await (const c of it) if (c !== null) yield c;
})(), { objectMode: true }));
