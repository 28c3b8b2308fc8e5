-- async-exec: request records and attempt logs (SQLite).
-- Times are unix milliseconds (INTEGER), the same in every dialect.
CREATE TABLE IF NOT EXISTS async_req (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    application_name TEXT    NOT NULL,
    executor         TEXT    NOT NULL,
    sign             TEXT    NOT NULL,
    strategy         TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    exec_count       INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    param_json       TEXT    NOT NULL,
    remark           TEXT    NOT NULL DEFAULT '',
    idempotency_key  TEXT,
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_until      INTEGER,
    last_error       TEXT,
    trace_json       TEXT,
    create_time      INTEGER NOT NULL,
    update_time      INTEGER NOT NULL
);

-- Only calls that pass a key are deduplicated; keyless inserts do not touch this index.
CREATE UNIQUE INDEX IF NOT EXISTS async_req_idempotency
    ON async_req (application_name, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Claims: waiting records of a status, in claim order (priority, then age), so that a
-- claim reads the first rows of the index instead of sorting the backlog. Only `init` and
-- `failed` rows are in it: a claim removes its rows, and finished rows never enter.
CREATE INDEX IF NOT EXISTS async_req_due
    ON async_req (application_name, status, priority DESC, run_at, id)
    WHERE status IN ('init', 'failed');

-- The rescuer: running records by lease end.
CREATE INDEX IF NOT EXISTS async_req_lease
    ON async_req (lease_until) WHERE status = 'running';

CREATE TABLE IF NOT EXISTS async_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    req_id     INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT    NOT NULL,
    started    INTEGER NOT NULL,
    finished   INTEGER NOT NULL,
    outcome    TEXT    NOT NULL,
    error      TEXT
);

CREATE INDEX IF NOT EXISTS async_log_req ON async_log (req_id, attempt);
