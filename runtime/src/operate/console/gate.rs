//! Password checks off the async workers: argon2 takes tens of milliseconds of CPU and
//! 19 MiB of memory on purpose, so a flood of logins must not take the threads that serve
//! every other request. Checks run on [`RUNNING`] threads of their own (started at the
//! first check, ended with the console): the memory of a check is reused by the next on
//! the same thread, where the blocking pool's changing threads each kept their own (the
//! resident memory grew by hundreds of MiB and stayed, issue 30). At most [`WAITING`]
//! more wait their turn, and beyond that a login is refused at once (503 with
//! `Retry-After`) without hashing anything; [`KEPT_FOR_DEVICES`] more places are kept for
//! browsers that logged in as the user they try before (their device cookie).
//!
//! A name that is no user's has no password to check: checking it against a decoy hash
//! only made its answer take as long as a user's, and let a flood of made-up names take
//! every check, so that the real operator's correct password was refused (503, issue 30).
//! Such a name now waits as long as a check takes (measured on the checks done, with
//! the queue in front of them) on a timer, without a turn and without CPU, and is told
//! it is busy when a user's try would be (see [`Gate::pretend`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use zeroize::Zeroizing;

use super::auth;
use super::config::{ConsoleConfig, Role};

/// Password checks running at once: the threads that run them.
pub(crate) const RUNNING: usize = 2;

/// Password checks waiting for a turn, at most.
pub(crate) const WAITING: usize = 16;

/// Places in the queue kept for tries from a browser whose device cookie says it logged
/// in as that user before: strangers guessing a user's name from many addresses fill
/// [`WAITING`], not these, so the user's own browser still gets its check.
pub(crate) const KEPT_FOR_DEVICES: usize = 4;

/// A password to check against a hash, the admission it holds until it is checked, and
/// where to send whether it matched and how long the check took.
struct Job {
    hash: String,
    password: Zeroizing<String>,
    _admitted: Admitted,
    done: oneshot::Sender<(bool, Duration)>,
}

/// The gate of password checks.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// The checking threads' queue (they end when it is dropped with the gate).
    jobs: OnceLock<Option<mpsc::Sender<Job>>>,
    /// Checks running or waiting.
    admitted: Arc<AtomicUsize>,
    /// How long a check takes, in nanoseconds (a moving average; 0 before the first).
    check_nanos: AtomicU64,
}

/// Too many password checks are running and waiting: try again in a moment.
#[derive(Debug)]
pub(crate) struct Busy;

/// Gives back an admission however the check ends (when it was checked, or dropped
/// unchecked).
struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts the checking threads; `None` when the system would not start one.
fn start_threads() -> Option<mpsc::Sender<Job>> {
    let (sender, receiver) = mpsc::channel::<Job>();
    let receiver = Arc::new(Mutex::new(receiver));
    for n in 0..RUNNING {
        let receiver = Arc::clone(&receiver);
        let started = std::thread::Builder::new()
            .name(format!("async-exec-console-password-{n}"))
            .spawn(move || {
                // This thread's argon2 memory, reused check after check.
                let mut memory = Vec::new();
                loop {
                    let job = match receiver.lock() {
                        Ok(receiver) => receiver.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else {
                        return;
                    };
                    let started = Instant::now();
                    let matches = auth::password_matches_in(&job.hash, &job.password, &mut memory);
                    let _ = job.done.send((matches, started.elapsed()));
                }
            });
        if let Err(error) = started {
            crate::log::error!(error = ?error.to_string(), "console: could not start a password-checking thread");
            return None;
        }
    }
    Some(sender)
}

impl Gate {
    /// The user `name`'s role when `password` is theirs, checked on the gate's threads;
    /// [`Busy`] when [`RUNNING`] + [`WAITING`] checks are under way already (and
    /// [`KEPT_FOR_DEVICES`] more for a try from a recognised device, `device`).
    pub(crate) async fn verify(
        &self,
        config: &ConsoleConfig,
        name: &str,
        password: &str,
        device: bool,
    ) -> Result<Option<Role>, Busy> {
        let places = RUNNING + WAITING + if device { KEPT_FOR_DEVICES } else { 0 };
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= places {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return Err(Busy);
        }
        let admitted = Admitted(Arc::clone(&self.admitted));
        let jobs = self.jobs.get_or_init(start_threads).as_ref().ok_or(Busy)?;
        let (role, hash) = auth::user_hash(config, name);
        let (done, checked) = oneshot::channel();
        let job = Job {
            hash,
            password: Zeroizing::new(password.to_string()),
            _admitted: admitted,
            done,
        };
        jobs.send(job).map_err(|_| Busy)?;
        let (matches, took) = checked.await.map_err(|_| Busy)?;
        self.measured(took);
        Ok(role.filter(|_| matches))
    }

    /// Keeps a moving average of how long a check takes (an eighth of the new one).
    fn measured(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .check_nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                Some(if old == 0 {
                    took
                } else {
                    old - old / 8 + took / 8
                })
            });
    }

    /// Answers a try of `name`, which is no user's, as a wrong password of a user is
    /// answered: [`Busy`] when a user's check would be refused, otherwise after as long as
    /// a check and the queue in front of it take, on a timer (no turn, no CPU). Until a
    /// check was measured, it checks against the decoy hash as a user's try would.
    pub(crate) async fn pretend(
        &self,
        config: &ConsoleConfig,
        name: &str,
        password: &str,
    ) -> Result<(), Busy> {
        let admitted = self.admitted.load(Ordering::Acquire);
        if admitted >= RUNNING + WAITING {
            return Err(Busy);
        }
        let check = self.check_nanos.load(Ordering::Acquire);
        if check == 0 {
            return self.verify(config, name, password, false).await.map(|_| ());
        }
        // Each turn in front of it takes about one check per running slot.
        let turns = 1 + admitted / RUNNING;
        tokio::time::sleep(Duration::from_nanos(check.saturating_mul(turns as u64))).await;
        Ok(())
    }
}
