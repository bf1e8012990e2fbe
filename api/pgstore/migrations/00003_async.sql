-- The asynchronous invocations' queue (issue 30; api/pgstore's AsyncQueue): one row per event
-- until it is purged or its function deleted. Any number of API replicas claim from it at once
-- (FOR UPDATE SKIP LOCKED); an enqueue or a redrive locks the function's row in async_depth, which
-- a trigger keeps counting its pending events, so that its depth quota holds between them at the
-- cost of one row, not of a count of up to max_queued rows.

-- +goose Up
CREATE TABLE async_events (
    id           text        PRIMARY KEY, -- sorts by creation time (apiv1.FormatAsyncID)
    namespace    text        NOT NULL,
    function     text        NOT NULL,
    state        text        NOT NULL     -- an event in no known state would never be claimed nor counted
                 CHECK (state IN ('queued', 'running', 'failed', 'succeeded', 'dead_lettered')),
    created      timestamptz NOT NULL,
    enqueued     timestamptz NOT NULL,    -- accepted or last redriven: max_age_sec counts from it
    redriven     timestamptz,             -- NULL unless redriven
    next_attempt timestamptz,             -- when a queued or failed event is due
    lease        text        NOT NULL DEFAULT '', -- the claim's token while running
    lease_until  timestamptz,
    -- When a dispatcher may take it: its next attempt, or the end of its lease while running
    -- ('-infinity', due at once, for a pending event without a time).
    due          timestamptz NOT NULL GENERATED ALWAYS AS (
                     COALESCE(CASE WHEN state = 'running' THEN lease_until ELSE next_attempt END, '-infinity')) STORED,
    -- When a done event was done (its last attempt's time, else enqueued): Purge's clock.
    finished     timestamptz NOT NULL,
    counted      integer     NOT NULL DEFAULT 0,
    error        text        NOT NULL DEFAULT '',
    attempts     jsonb       NOT NULL DEFAULT '[]',
    method       text        NOT NULL,
    path         text        NOT NULL,
    header       jsonb,
    body         bytea
);
-- Claim: the pending events due first (and Claim's next: the earliest of them).
CREATE INDEX async_events_due ON async_events (due, id) WHERE state IN ('queued', 'failed', 'running');
-- Stats: a function's pending events, oldest first.
CREATE INDEX async_events_pending ON async_events (namespace, function, enqueued) WHERE state IN ('queued', 'failed', 'running');
-- GET …/dead-letters: a function's, newest first (ids sort by time).
CREATE INDEX async_events_dead ON async_events (namespace, function, id DESC) WHERE state = 'dead_lettered';
-- Purge: done events finished before a time.
CREATE INDEX async_events_done ON async_events (finished) WHERE state IN ('succeeded', 'dead_lettered');
-- Forget: every event of a deleted function.
CREATE INDEX async_events_function ON async_events (namespace, function);

-- Each function's pending events (queued, failed, running), kept by the trigger below on every
-- change of async_events: Enqueue and Redrive lock the row and compare it with the quota.
CREATE TABLE async_depth (
    namespace text    NOT NULL,
    function  text    NOT NULL,
    pending   integer NOT NULL,
    PRIMARY KEY (namespace, function)
);

-- +goose StatementBegin
CREATE FUNCTION async_depth_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    counted_before boolean := false; -- the old row counted (was pending)
    counts_now     boolean := false; -- the new row counts (is pending)
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        counted_before := OLD.state IN ('queued', 'failed', 'running');
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        counts_now := NEW.state IN ('queued', 'failed', 'running');
    END IF;
    IF counted_before AND (NOT counts_now OR OLD.namespace <> NEW.namespace OR OLD.function <> NEW.function) THEN
        UPDATE async_depth SET pending = pending - 1 WHERE namespace = OLD.namespace AND function = OLD.function;
    END IF;
    IF counts_now AND (NOT counted_before OR OLD.namespace <> NEW.namespace OR OLD.function <> NEW.function) THEN
        INSERT INTO async_depth AS d VALUES (NEW.namespace, NEW.function, 1)
            ON CONFLICT (namespace, function) DO UPDATE SET pending = d.pending + 1;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- Only where the count changes: a claim (queued to running) or a retry (running to failed) calls
-- no function.
CREATE TRIGGER async_depth_insert AFTER INSERT ON async_events
    FOR EACH ROW WHEN (NEW.state IN ('queued', 'failed', 'running')) EXECUTE FUNCTION async_depth_count();
CREATE TRIGGER async_depth_delete AFTER DELETE ON async_events
    FOR EACH ROW WHEN (OLD.state IN ('queued', 'failed', 'running')) EXECUTE FUNCTION async_depth_count();
CREATE TRIGGER async_depth_update AFTER UPDATE OF state, namespace, function ON async_events
    FOR EACH ROW WHEN ((OLD.state IN ('queued', 'failed', 'running')) <> (NEW.state IN ('queued', 'failed', 'running'))
        OR OLD.namespace <> NEW.namespace OR OLD.function <> NEW.function)
    EXECUTE FUNCTION async_depth_count();

-- +goose Down
DROP TABLE async_events;
DROP FUNCTION async_depth_count();
DROP TABLE async_depth;
