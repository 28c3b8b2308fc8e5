-- async-exec: the instances that share this database announce themselves here, with the
-- signatures of the executors they link (issue 8 item 7). `seen` is the database's clock
-- at the instance's last announcement; an instance not seen for a lease is gone. A record
-- whose signature this binary does not have is left for a live instance that has it.
CREATE TABLE IF NOT EXISTS async_instance (
    owner            VARCHAR(400) NOT NULL PRIMARY KEY,
    application_name VARCHAR(255) NOT NULL,
    workers          BOOLEAN      NOT NULL,
    started          BIGINT       NOT NULL,
    seen             BIGINT       NOT NULL,
    executors        LONGTEXT     NOT NULL,
    KEY async_instance_seen (application_name, seen)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
