-- async-exec: MariaDB/MySQL's running records are read through the claim index (its
-- full lease index dropped). The same version on every backend: a no-op here, where the
-- lease index is partial (only running records are in it).
SELECT 1;
