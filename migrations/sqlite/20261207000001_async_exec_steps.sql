-- async-exec: durable steps (issue 21). `ctx.step("charge", || async { .. })` writes the
-- JSON of a finished step's value here, fenced by the record's owner and attempt; a later
-- attempt of the request reads its steps back and skips the finished ones. The rows of a
-- deleted request are left behind and deleted by the retention sweep, as its tags are.
CREATE TABLE IF NOT EXISTS async_step (
    application_name VARCHAR(255) NOT NULL,
    req_id           BIGINT       NOT NULL,
    position         INTEGER      NOT NULL,
    name             VARCHAR(255) NOT NULL,
    value_json       TEXT         NOT NULL,
    attempt          INTEGER      NOT NULL,
    create_time      BIGINT       NOT NULL,
    PRIMARY KEY (req_id, position)
);
CREATE INDEX IF NOT EXISTS async_step_app ON async_step (application_name, create_time);
