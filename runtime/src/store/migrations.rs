//! Whether a database's schema is up to date already, read in one statement: every start
//! of a service reads it, and only a database that lacks a migration (or a schema that
//! another instance is migrating now) goes through the migrator, its lock and its checks.

use sqlx::migrate::Migrator;

/// A row of `_sqlx_migrations`: version, checksum, whether it was applied in full.
pub(crate) type AppliedRow = (i64, Vec<u8>, bool);

/// What the store reads to learn what is applied.
pub(crate) const APPLIED: &str = "SELECT version, checksum, success FROM _sqlx_migrations";

/// Whether every up migration of `migrator` is among `applied`, in full and with its
/// checksum. Anything else (one missing, one half applied, a checksum that differs: the
/// migrator reports those) is for the migrator to handle.
pub(crate) fn up_to_date(migrator: &Migrator, applied: &[AppliedRow]) -> bool {
    migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .all(|m| {
            applied.iter().any(|(version, checksum, success)| {
                *version == m.version && *success && checksum.as_slice() == &*m.checksum
            })
        })
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    #[test]
    fn only_every_migration_applied_in_full_with_its_checksum_is_up_to_date() {
        let migrator = sqlx::migrate!("../migrations/sqlite");
        let all: Vec<AppliedRow> = migrator
            .iter()
            .map(|m| (m.version, m.checksum.to_vec(), true))
            .collect();
        assert!(up_to_date(&migrator, &all));
        // The application's own migrations beside ours change nothing.
        let mut more = all.clone();
        more.push((1, vec![1, 2, 3], true));
        assert!(up_to_date(&migrator, &more));
        assert!(!up_to_date(&migrator, &all[..all.len() - 1]), "one missing");
        let mut dirty = all.clone();
        dirty.last_mut().unwrap().2 = false;
        assert!(!up_to_date(&migrator, &dirty), "one half applied");
        let mut changed = all.clone();
        changed[0].1[0] ^= 1;
        assert!(!up_to_date(&migrator, &changed), "one edited since");
        assert!(!up_to_date(&migrator, &[]), "a new database");
    }
}
