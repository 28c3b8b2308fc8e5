-- async-exec: tags (issue 20). `.tag("subscription:42")` on a call writes a row here in
-- the call's transaction; `RequestQuery::tag` (rt.list, the API, the CLI, the console,
-- and actions on what a filter matches) reads through the primary key. The rows of a
-- deleted request are left behind and deleted by the retention sweep, as orphaned
-- attempt logs are; no row is written for a call without tags.
CREATE TABLE IF NOT EXISTS async_tag (
    application_name VARCHAR(255) NOT NULL,
    tag              VARCHAR(255) NOT NULL,
    req_id           BIGINT       NOT NULL,
    create_time      BIGINT       NOT NULL,
    PRIMARY KEY (application_name, tag, req_id),
    KEY async_tag_req (req_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
