// Answers every request with a greeting and what it was asked.
exports.handle = async (event) => {
  const name = (event.query.name || ['world'])[0];
  return { message: `hello, ${name}`, method: event.method, path: event.path };
};
