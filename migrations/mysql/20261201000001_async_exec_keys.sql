-- async-exec: idempotency keys outlive their records (issue 8 item 4; MySQL 8 / MariaDB 10.6+).
-- A key is remembered here, per application, until `expire_time` (its first use plus the
-- `key_retention` setting), whatever happens to the request it names: deleted on success,
-- dead, cancelled, deleted by an operator. `request_id` is NULL for a `SyncSave` call whose
-- body ran at once (no record was written). The key is written in the same transaction
-- as its request, so that a second transaction with the key waits on this primary key.
-- As in `async_req`: the key is a byte string (neither case nor trailing spaces ignored),
-- and the primary key (255 utf8mb4 characters + 1,020 bytes = 2,040 bytes) is within
-- InnoDB's 3,072-byte limit of the DYNAMIC row format.
CREATE TABLE IF NOT EXISTS async_key (
    application_name VARCHAR(255)    NOT NULL,
    idempotency_key  VARBINARY(1020) NOT NULL,
    request_id       BIGINT,
    create_time      BIGINT          NOT NULL,
    expire_time      BIGINT          NOT NULL,
    PRIMARY KEY (application_name, idempotency_key),
    -- The sweep of expired keys.
    KEY async_key_expire (application_name, expire_time)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Keys of the records written before this table, kept 24 hours from their record's
-- creation (the default retention).
INSERT IGNORE INTO async_key (application_name, idempotency_key, request_id, create_time, expire_time)
SELECT application_name, idempotency_key, id, create_time, create_time + 86400000
FROM async_req WHERE idempotency_key IS NOT NULL;

-- The key table deduplicates now: a record keeps its key for reference only, and a key
-- used again after it expired may name a new record while the old one is still kept.
ALTER TABLE async_req DROP INDEX async_req_idempotency;
