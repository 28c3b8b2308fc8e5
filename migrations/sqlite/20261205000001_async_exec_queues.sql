-- async-exec: queues with limits (issue 20). A claim of a limited queue's records locks
-- the queue's row here (made on its first claim) for the length of its transaction, so
-- that claims of one queue by several instances take turns and each counts the running
-- records the one before it claimed. (SQLite serializes every write: the row is not
-- locked there, the table is kept for the same schema on every backend.)
CREATE TABLE IF NOT EXISTS async_queue (
    application_name TEXT NOT NULL,
    name             TEXT NOT NULL,
    PRIMARY KEY (application_name, name)
);
