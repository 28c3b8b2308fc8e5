-- async-exec: an instance's name is `application@host:pid:<32 hex digits>` (128 random
-- bits keep two live instances apart; in containers every replica is pid 1), up to 364
-- characters with the longest application name (255) and host part (64). The columns
-- that hold it were VARCHAR(255) here (a claim of the longest names failed with "Data
-- too long"); `async_instance.owner` is VARCHAR(400) already. The same version on every
-- backend (a no-op on PostgreSQL and SQLite, whose columns are TEXT).
ALTER TABLE async_req
    MODIFY lease_owner VARCHAR(400) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
ALTER TABLE async_log
    MODIFY worker VARCHAR(400) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
