-- async-exec: idempotency keys outlive their records (issue 8 item 4).
-- A key is remembered here, per application, until `expire_time` (its first use plus the
-- `key_retention` setting), whatever happens to the request it names: deleted on success,
-- dead, cancelled, deleted by an operator. `request_id` is NULL for a `SyncSave` call whose
-- body ran at once (no record was written). The key is written in the same transaction
-- as its request, so that a second transaction with the key waits on this primary key.
CREATE TABLE IF NOT EXISTS async_key (
    application_name TEXT   NOT NULL,
    idempotency_key  TEXT   NOT NULL,
    request_id       BIGINT,
    create_time      BIGINT NOT NULL,
    expire_time      BIGINT NOT NULL,
    PRIMARY KEY (application_name, idempotency_key)
);

-- The sweep of expired keys.
CREATE INDEX IF NOT EXISTS async_key_expire ON async_key (application_name, expire_time);

-- Keys of the records written before this table, kept 24 hours from their record's
-- creation (the default retention).
INSERT INTO async_key (application_name, idempotency_key, request_id, create_time, expire_time)
SELECT application_name, idempotency_key, id, create_time, create_time + 86400000
FROM async_req WHERE idempotency_key IS NOT NULL
ON CONFLICT DO NOTHING;

-- The key table deduplicates now: a record keeps its key for reference only, and a key
-- used again after it expired may name a new record while the old one is still kept.
DROP INDEX IF EXISTS async_req_idempotency;
