def handle(event):
    """Answers every request with a greeting and what it was asked."""
    name = (event.get("query") or {}).get("name", ["world"])[0]
    return {"message": f"hello, {name}", "method": event.get("method"), "path": event.get("path")}
