-- async-exec: quotas of waiting requests (issue 20). A call under a quota (the
-- application's, its queue's, its owner's) locks the quota's row here in its transaction
-- before it counts the waiting requests and writes its own: submissions under one quota
-- take turns, so that racing transactions never exceed it. A row per quota in use.
CREATE TABLE IF NOT EXISTS async_quota (
    application_name VARCHAR(255) NOT NULL,
    scope            VARCHAR(400) NOT NULL,
    PRIMARY KEY (application_name, scope)
);
