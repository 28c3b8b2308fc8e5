-- async-exec: a partition's own settings (issue 30). A row for each partition of a queue
-- that has settings of its own (`rt.set_partition`, the console, the API, the CLI); a
-- partition without a row has the queue's defaults (weight 1, the queue's per_partition,
-- no rate of its own). A queue's claim reads the rows of the partitions among its
-- candidates and of those running at their queue's per-partition limit, never the whole
-- table (10,000 tenants). `weight`: records per turn between the queue's partitions;
-- `concurrency`: running at once, over every instance (in place of the queue's
-- per_partition); `rate` starts per `rate_period_ms`, a token bucket in the row:
-- `tokens` (thousandths of a start) as of `refilled_at` (unix ms), taken by each claim
-- with one conditional UPDATE (no lock held across round trips).
CREATE TABLE IF NOT EXISTS async_partition (
    application_name VARCHAR(255) NOT NULL,
    queue_name       VARCHAR(190) NOT NULL,
    partition_key    VARCHAR(255) NOT NULL,
    weight           INTEGER NULL,
    concurrency      INTEGER NULL,
    rate             INTEGER NULL,
    rate_period_ms   BIGINT NULL,
    tokens           BIGINT NULL,
    refilled_at      BIGINT NULL,
    changed_by       VARCHAR(255) NULL,
    changed_at       BIGINT NULL,
    PRIMARY KEY (application_name, queue_name, partition_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The turns' cursor of a queue (`turn_after`) now keeps how many records the partition
-- served last took in its turn, before its name (up to 255 characters): wider.
ALTER TABLE async_queue MODIFY turn_after VARCHAR(300) NULL;
