-- async-exec: the instances that share this database announce themselves here, with the
-- signatures of the executors they link (issue 8 item 7). `seen` is the database's clock
-- at the instance's last announcement; an instance not seen for a lease is gone. A record
-- whose signature this binary does not have is left for a live instance that has it.
CREATE TABLE IF NOT EXISTS async_instance (
    owner            TEXT    NOT NULL PRIMARY KEY,
    application_name TEXT    NOT NULL,
    workers          INTEGER NOT NULL,
    started          INTEGER NOT NULL,
    seen             INTEGER NOT NULL,
    executors        TEXT    NOT NULL
);

CREATE INDEX IF NOT EXISTS async_instance_seen ON async_instance (application_name, seen);
