-- async-exec: queues and their limits (issue 20). Every queue a service's executors
-- name has a row here (made at start). A claim of a queue's records locks the queue's
-- row for the length of its transaction, so that claims of one queue by several
-- instances take turns and each counts the running records the one before it claimed
-- (SQLite serializes every write: the row is read, not locked, there). The row's
-- limits, set while the service runs (`rt.set_queue_limits`, the CLI's `queue-limits`),
-- override the builder's; NULL keeps the builder's. A queue with a rate keeps its token
-- bucket here: `tokens` (thousandths of a start) as of `refilled_at` (unix ms).
CREATE TABLE IF NOT EXISTS async_queue (
    application_name TEXT NOT NULL,
    name             TEXT NOT NULL,
    concurrency      INTEGER NULL,
    per_instance     INTEGER NULL,
    rate             INTEGER NULL,
    tokens           BIGINT NULL,
    refilled_at      BIGINT NULL,
    changed_by       TEXT NULL,
    changed_at       BIGINT NULL,
    PRIMARY KEY (application_name, name)
);
