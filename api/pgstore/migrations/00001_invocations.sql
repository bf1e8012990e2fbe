-- The invocation history of /fn/ (api/pgstore). Applied by goose at start.

-- +goose Up
CREATE TABLE invocations (
    id          bigserial PRIMARY KEY,
    namespace   text             NOT NULL,
    function    text             NOT NULL,
    time        timestamptz      NOT NULL,
    status      integer          NOT NULL,
    duration_ms double precision NOT NULL,
    request_id  text             NOT NULL DEFAULT ''
);
-- GET …/invocations: one function's newest first, paged by time; Forget by (namespace, function).
CREATE INDEX invocations_function_time ON invocations (namespace, function, time DESC);
-- Retention deletes the oldest rows of all functions.
CREATE INDEX invocations_time ON invocations (time);

-- +goose Down
DROP TABLE invocations;
