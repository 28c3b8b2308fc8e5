-- async-exec: the console's status list on MariaDB/MySQL without a cost to claims (a
-- virtual column there). Nothing to do here: this backend's list indexes are partial
-- (finished records only) since 20261202000001. The same version on every backend.
SELECT 1;
