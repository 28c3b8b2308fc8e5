-- async-exec: policies changed while running (issue 20). A queue's row (or, for an
-- executor in no queue, a row named after the executor) may override, beside its limits:
-- whether its requests are claimed at all (`paused`), the attempts a request gets, the
-- backoff of retries (first delay and cap, ms), a body's timeout (ms) and a boost added
-- to the priority of new requests. NULL keeps what the attribute and the builder say.
-- Every instance re-reads the rows each second.
ALTER TABLE async_queue ADD COLUMN paused INTEGER NULL;
ALTER TABLE async_queue ADD COLUMN max_attempts INTEGER NULL;
ALTER TABLE async_queue ADD COLUMN backoff_base_ms BIGINT NULL;
ALTER TABLE async_queue ADD COLUMN backoff_cap_ms BIGINT NULL;
ALTER TABLE async_queue ADD COLUMN timeout_ms BIGINT NULL;
ALTER TABLE async_queue ADD COLUMN priority_boost INTEGER NULL;
