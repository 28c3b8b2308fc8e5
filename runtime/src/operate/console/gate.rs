//! Password checks off the async workers: argon2 takes tens of milliseconds of CPU and
//! memory on purpose, so a flood of logins must not take the threads that serve every
//! other request. Checks run on the blocking pool, [`RUNNING`] at a time; at most
//! [`WAITING`] more wait their turn, and beyond that a login is refused at once (503 with
//! `Retry-After`) without hashing anything.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::auth;
use super::config::{ConsoleConfig, Role};

/// Password checks running at once.
pub(crate) const RUNNING: usize = 2;

/// Password checks waiting for a turn, at most.
pub(crate) const WAITING: usize = 16;

/// The gate of password checks.
#[derive(Debug)]
pub(crate) struct Gate {
    turns: Arc<Semaphore>,
    /// Checks running or waiting.
    admitted: AtomicUsize,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            turns: Arc::new(Semaphore::new(RUNNING)),
            admitted: AtomicUsize::new(0),
        }
    }
}

/// Too many password checks are running and waiting: try again in a moment.
#[derive(Debug)]
pub(crate) struct Busy;

/// Gives back an admission however the check ends (also when its future is dropped).
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Gate {
    /// The user `name`'s role when `password` is theirs, checked on the blocking pool;
    /// [`Busy`] when [`RUNNING`] + [`WAITING`] checks are under way already.
    pub(crate) async fn verify(
        &self,
        config: &ConsoleConfig,
        name: &str,
        password: &str,
    ) -> Result<Option<Role>, Busy> {
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= RUNNING + WAITING {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return Err(Busy);
        }
        let _admitted = Admitted(&self.admitted);
        let permit = Arc::clone(&self.turns)
            .acquire_owned()
            .await
            .map_err(|_| Busy)?;
        let (role, hash) = auth::user_hash(config, name);
        let password = password.to_string();
        let matches = tokio::task::spawn_blocking(move || {
            let matches = auth::password_matches(&hash, &password);
            drop(permit);
            matches
        })
        .await
        .map_err(|_| Busy)?;
        Ok(role.filter(|_| matches))
    }
}
