-- async-exec: request records and attempt logs (MySQL 8 / MariaDB 10.6+).
-- Times are unix milliseconds (BIGINT), the same in every dialect.
-- Text compares exactly (binary collation), as in SQLite and PostgreSQL; the idempotency
-- key is a byte string so that neither case nor trailing spaces are ignored.
-- Indexes are declared in CREATE TABLE: MySQL has no CREATE INDEX IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS async_req (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    application_name VARCHAR(255) NOT NULL,
    executor         VARCHAR(255) NOT NULL,
    sign             VARCHAR(255) NOT NULL,
    strategy         VARCHAR(255) NOT NULL,
    status           VARCHAR(255) NOT NULL,
    exec_count       INT          NOT NULL DEFAULT 0,
    max_attempts     INT          NOT NULL,
    param_json       LONGTEXT     NOT NULL,
    remark           TEXT         NOT NULL,
    idempotency_key  VARBINARY(1020),
    priority         INT          NOT NULL DEFAULT 0,
    run_at           BIGINT       NOT NULL,
    lease_owner      VARCHAR(255),
    lease_until      BIGINT,
    last_error       LONGTEXT,
    trace_json       LONGTEXT,
    create_time      BIGINT       NOT NULL,
    update_time      BIGINT       NOT NULL,
    -- NULL keys are distinct, so only calls that pass a key are deduplicated.
    UNIQUE KEY async_req_idempotency (application_name, idempotency_key),
    -- The claims of due records: by status, in the order they are claimed
    -- (priority DESC, run_at, id; InnoDB appends the id), so that a claim reads a few
    -- index entries rather than sorting the whole backlog.
    KEY async_req_due (application_name, status, priority DESC, run_at, id),
    -- The rescuer: running records by lease end.
    KEY async_req_lease (status, lease_until)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS async_log (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    req_id     BIGINT       NOT NULL,
    attempt    INT          NOT NULL,
    worker     VARCHAR(255) NOT NULL,
    started    BIGINT       NOT NULL,
    finished   BIGINT       NOT NULL,
    outcome    VARCHAR(255) NOT NULL,
    error      LONGTEXT,
    KEY async_log_req (req_id, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
