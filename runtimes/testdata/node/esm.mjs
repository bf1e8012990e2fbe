export async function handle(event) {
  return { esm: true, path: event.path };
}
