"""Processes one order: a message of the "orders" queue (the rabbitmq trigger) or an asynchronous
invocation (sless invoke orders --async). The body is the order as JSON:

    {"order_id": "1001", "items": [{"sku": "A-1", "qty": 2, "price": 3.5}]}

Delivery is at least once: a message whose answer was lost is delivered again, so the handler
de-duplicates on the id the platform sends in x-sless-event-message-id (the message's message_id,
or the asynchronous invocation's id). This example remembers the ids an instance has seen; a real
handler records them where it records the order (a unique key in its database), in the same
transaction.

The answer decides what happens to the message: a 2xx acknowledges it; an order that can never be
processed is refused with a 4xx and goes to the dead-letter queue at once; an exception (a 500) is
retried with backoff, then dead-lettered.
"""

import base64
import collections
import json

# Ids this instance has processed, with their result: the oldest forgotten beyond SEEN_MAX.
SEEN_MAX = 10_000
_seen = collections.OrderedDict()


def handle(event):
    headers = event.get("headers") or {}
    message_id = headers.get("x-sless-event-message-id")
    source = headers.get("x-sless-event-source") or "http"

    order, err = parse(event)
    if err:
        # The function's own 4xx: dead-lettered at once with this text, never retried.
        print(json.dumps({"rejected": message_id, "source": source, "error": err}))
        return {"statusCode": 422, "body": {"error": err}}

    if message_id and message_id in _seen:
        # Delivered again (a redelivery, or published twice): answer as before, do nothing twice.
        return dict(_seen[message_id], duplicate=True)

    total = round(sum(item["qty"] * item["price"] for item in order["items"]), 2)
    result = {"order_id": order["order_id"], "total": total, "message_id": message_id, "source": source, "duplicate": False}
    print(json.dumps({"processed": order["order_id"], "message_id": message_id, "source": source, "total": total}))

    if message_id:
        _seen[message_id] = result
        while len(_seen) > SEEN_MAX:
            _seen.popitem(last=False)
    return result


def parse(event):
    """Returns (order, None) or (None, why the body is not an order)."""
    body = event.get("body")
    if event.get("is_base64_encoded") and isinstance(body, str):
        body = base64.b64decode(body).decode("utf-8", "replace")
    if isinstance(body, str):  # a message published without content_type application/json
        try:
            body = json.loads(body)
        except ValueError:
            return None, "the body is not JSON"
    if not isinstance(body, dict) or not body.get("order_id"):
        return None, "an order needs an order_id"
    items = body.get("items")
    if not isinstance(items, list) or not items:
        return None, "an order needs items"
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("qty"), int) or item["qty"] < 1 \
                or not isinstance(item.get("price"), (int, float)) or item["price"] < 0:
            return None, "each item needs a qty (a positive integer) and a price"
    return body, None
