const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));

function respond(event) {
  const p = event.path;
  if (p === '/echo') return { event };
  if (p === '/crlf') return { statusCode: 200, headers: { 'X-Evil': 'a\r\nSet-Cookie: pwned=1' }, body: 'x' };
  if (p === '/badname') return { statusCode: 200, headers: { 'Bad Name': 'v' }, body: 'x' };
  if (p === '/status') return { statusCode: 201, headers: { 'X-Custom': 'yes', 'Content-Type': 'text/plain' }, body: 'created' };
  if (p === '/none') return undefined;
  if (p === '/text') return 'plain text';
  if (p === '/raise') throw new Error('boom');
  if (p === '/binary') return { statusCode: 200, headers: { 'Content-Type': 'application/octet-stream' }, body: 'AAEC/w==', isBase64Encoded: true };
  return { path: p };
}

exports.handle = async (event) => {
  if (event.path === '/slow') {
    process.stderr.write('slow: started\n');
    await sleep(parseFloat((event.query.s || ['5'])[0]));
    return { slept: true };
  }
  return respond(event);
};

// A synchronous handler: /slow cannot be served without blocking, so it is left out of its cases.
exports.handleSync = (event) => respond(event);

exports.job = (event) => ({ sum: event.input.reduce((a, b) => a + b, 0) });

exports.jobFail = () => {
  throw new Error('job failed on purpose');
};

exports.echoEvent = (event) => event;
