-- What called (issue 30): '' for /fn/ over HTTP, 'rabbitmq' for a trigger's message, with the
-- message's id.

-- +goose Up
ALTER TABLE invocations ADD COLUMN source text NOT NULL DEFAULT '';
ALTER TABLE invocations ADD COLUMN message_id text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE invocations DROP COLUMN message_id;
ALTER TABLE invocations DROP COLUMN source;
