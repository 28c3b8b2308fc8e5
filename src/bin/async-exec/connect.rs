//! Opening the runtime the tool works through: no workers, no sweeps, not global; the
//! tables migrated only by `migrate`; and for SQLite, no new file made by a typo.

use std::path::PathBuf;

use async_exec::Runtime;

use crate::failure::Failure;

/// A runtime on `url` for `application` that runs nothing: submit-only
/// (`run_workers(false)`), so that it claims no record, runs no sweep, and announces
/// itself (until it stops) as an instance without workers.
pub(crate) async fn open(url: &str, application: &str, migrate: bool) -> Result<Runtime, Failure> {
    if !migrate {
        if let Some(path) = sqlite_file(url) {
            if !path.exists() {
                return Err(Failure::Failed(format!(
                    "no SQLite database at `{}`: check --url, or create the tables with \
                     `async-exec migrate --url {}`",
                    path.display(),
                    crate::redact::url(url)
                )));
            }
        }
    }
    let rt = Runtime::builder()
        .database_url(url)
        .application_name(application)
        .run_workers(false)
        .install_global(false)
        .listen(false)
        .migrate(migrate)
        .max_connections(2)
        .start()
        .await?;
    Ok(rt)
}

/// The file a SQLite URL names, unless it names an in-memory database.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let path = path.strip_prefix("//").unwrap_or(path);
    if path.is_empty() || path == ":memory:" || query.split('&').any(|p| p == "mode=memory") {
        return None;
    }
    Some(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::sqlite_file;
    use std::path::PathBuf;

    #[test]
    fn sqlite_urls_name_their_file() {
        assert_eq!(sqlite_file("sqlite:app.db"), Some(PathBuf::from("app.db")));
        assert_eq!(
            sqlite_file("sqlite://app.db?mode=rwc"),
            Some(PathBuf::from("app.db"))
        );
        assert_eq!(
            sqlite_file("sqlite:///tmp/a.db"),
            Some(PathBuf::from("/tmp/a.db"))
        );
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("postgres://h/db"), None);
    }
}
