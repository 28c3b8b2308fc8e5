-- async-exec: operators see flow (issue 30, item 7). The same version on every backend.

-- Starts and finished attempts of each queue, counted per minute (unix ms of its start)
-- in every instance's memory and added every few seconds (with `async_stat`): a queue's
-- rate is read from here (its last two minutes: a primary-key range), never from the
-- records. Pruned with `async_stat`.
CREATE TABLE IF NOT EXISTS async_queue_stat (
    application_name TEXT NOT NULL,
    queue_name       TEXT NOT NULL,
    minute           BIGINT NOT NULL,
    started          BIGINT NOT NULL DEFAULT 0,
    finished         BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (application_name, minute, queue_name)
);

-- The saturation history: a sample of each queue with anything running, waiting or
-- started, every `flow_sample_interval` (`at`: the start of its period, the
-- database's clock), kept for `flow_history`. `concurrency` is the limit in force then.
CREATE TABLE IF NOT EXISTS async_flow (
    application_name TEXT NOT NULL,
    queue_name       TEXT NOT NULL,
    at               BIGINT NOT NULL,
    running          BIGINT NOT NULL,
    waiting          BIGINT NOT NULL,
    due              BIGINT NOT NULL,
    lag_ms           BIGINT NULL,
    started          BIGINT NOT NULL,
    concurrency      BIGINT NULL,
    verdict          VARCHAR(20) NOT NULL,
    PRIMARY KEY (application_name, queue_name, at)
);

-- The prune of old samples: by application and time.
CREATE INDEX IF NOT EXISTS async_flow_at ON async_flow (application_name, at);

-- Which period's samples were taken: one row per application. An instance takes a
-- period by moving `at` forward (an UPDATE that only one instance's can change), and
-- only that instance samples it.
CREATE TABLE IF NOT EXISTS async_flow_slot (
    application_name TEXT NOT NULL,
    at               BIGINT NOT NULL,
    PRIMARY KEY (application_name)
);
