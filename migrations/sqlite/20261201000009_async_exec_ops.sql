-- async-exec: what the operations console needs (issue 9).
-- The same version on every backend.

-- Finished attempts counted per minute (unix ms / 60,000), by application and executor,
-- so that the per-minute charts survive `delete_on_success`. Every instance adds its
-- counts every few seconds.
CREATE TABLE IF NOT EXISTS async_stat (
    application_name TEXT NOT NULL,
    executor         TEXT NOT NULL,
    minute           BIGINT NOT NULL,
    succeeded        BIGINT NOT NULL DEFAULT 0,
    failed           BIGINT NOT NULL DEFAULT 0,
    retried          BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (application_name, minute, executor)
);

-- Queue depth sampled once a minute: waiting (`init` and `failed`) and running records.
CREATE TABLE IF NOT EXISTS async_depth (
    application_name TEXT NOT NULL,
    minute           BIGINT NOT NULL,
    waiting          BIGINT NOT NULL,
    running          BIGINT NOT NULL,
    PRIMARY KEY (application_name, minute)
);

-- Executors whose claims are paused, on every instance of the application (each reads
-- this table every second). Later policies (rate limits, concurrency) can grow into it.
CREATE TABLE IF NOT EXISTS async_pause (
    application_name TEXT NOT NULL,
    executor         TEXT NOT NULL,
    paused_by        TEXT NOT NULL,
    paused_at        BIGINT NOT NULL,
    PRIMARY KEY (application_name, executor)
);

-- Every operator action: who, what, on which requests (ids or the filter), how many, when.
CREATE TABLE IF NOT EXISTS async_audit (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    application_name TEXT NOT NULL,
    actor            TEXT NOT NULL,
    action           TEXT NOT NULL,
    target           TEXT NOT NULL,
    affected         BIGINT NOT NULL,
    create_time      BIGINT NOT NULL
);

CREATE INDEX IF NOT EXISTS async_audit_time ON async_audit (create_time);

-- The console's request list: keyset pages by creation time, alone or with a status or
-- an executor, and lookups by idempotency key (only keyed records are in that index
-- where the backend has partial indexes: keyless inserts do not touch it).
CREATE INDEX IF NOT EXISTS async_req_created ON async_req (application_name, create_time, id);
CREATE INDEX IF NOT EXISTS async_req_status_created ON async_req (application_name, status, create_time, id);
CREATE INDEX IF NOT EXISTS async_req_executor_created ON async_req (application_name, executor, create_time, id);
CREATE INDEX IF NOT EXISTS async_req_key ON async_req (application_name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
