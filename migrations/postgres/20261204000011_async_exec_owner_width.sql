-- async-exec: MariaDB/MySQL's columns that hold an instance's name are widened to 400
-- characters (`application@host:pid:<32 hex digits>`). The same version on every backend:
-- a no-op here, where they are TEXT.
SELECT 1;
