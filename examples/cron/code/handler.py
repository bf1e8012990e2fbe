import datetime


def handle(event):
    """Called by the cron trigger with {"source": "cron", "trigger": ..., "scheduled_time": ...}."""
    return {"report": "daily", "for": event.get("scheduled_time"), "ran_at": datetime.datetime.utcnow().isoformat() + "Z"}
