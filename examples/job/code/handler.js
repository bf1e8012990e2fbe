// Job mode: the event is EVENT_JSON itself; the seed's job reads event.input.
exports.handle = async (event) => ({ sum: (event.input || []).reduce((a, b) => a + b, 0) });
