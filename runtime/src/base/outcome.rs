//! How an executor body's result becomes an outcome: success, a retryable failure,
//! or a final one.

use std::any::Any;
use std::fmt;
use std::time::Duration;

use crate::base::trace::TraceContext;

/// An error that is not worth a retry: the request goes to `dead` at once.
///
/// Return it from a body (directly, boxed, or inside an `anyhow::Error`):
///
/// ```
/// use async_exec::Final;
/// fn check(email: &str) -> anyhow::Result<()> {
///     if !email.contains('@') {
///         return Err(Final::new(format!("`{email}` is not an address")).into());
///     }
///     Ok(())
/// }
/// assert!(check("nope").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Final(String);

impl Final {
    /// A final error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Final(message.into())
    }
}

impl fmt::Display for Final {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Final {}

/// Not now, later: returned by a body (directly, boxed, or inside an `anyhow::Error`), it
/// puts the request back to run again after `delay`, without using up an attempt (its
/// `max_attempts` grows by one): a third-party API that answered 429 with `Retry-After`,
/// a resource that is not ready yet. The request waits `init`; the attempt is logged as
/// `snoozed` with the message.
///
/// ```
/// use std::time::Duration;
/// use async_exec::Snooze;
///
/// #[async_exec::async_exec(type = SaveAsync)]
/// async fn sync_crm(account: i64) -> anyhow::Result<()> {
///     let retry_after: Option<u64> = Some(30); // from the API's answer
///     if let Some(seconds) = retry_after {
///         return Err(Snooze::new(Duration::from_secs(seconds), "CRM said 429").into());
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snooze {
    delay: Duration,
    reason: String,
}

/// The longest snooze: a year, as the longest setting (a longer one is a mistake, and
/// would overflow the millisecond times the records hold).
const MAX_SNOOZE: Duration = Duration::from_secs(366 * 24 * 3600);

impl Snooze {
    /// The shortest snooze: a shorter `delay` (a `Retry-After: 0`) waits this long, so
    /// that a body that snoozes for nothing does not run again and again at once (a
    /// snooze uses no attempt).
    pub const MIN_DELAY: Duration = Duration::from_secs(1);

    /// Run again after `delay` (at least [`MIN_DELAY`](Snooze::MIN_DELAY), at most a
    /// year), for `reason` (shown as the request's last error while it waits).
    pub fn new(delay: Duration, reason: impl Into<String>) -> Self {
        Snooze {
            delay: delay.clamp(Self::MIN_DELAY, MAX_SNOOZE),
            reason: reason.into(),
        }
    }

    /// How long the request waits.
    pub fn delay(&self) -> Duration {
        self.delay
    }
}

impl fmt::Display for Snooze {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "snoozed for {:?}: {}", self.delay, self.reason)
    }
}

impl std::error::Error for Snooze {}

/// Why an execution did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The body returned an error; it will be retried while attempts remain.
    Error,
    /// The body returned a [`Final`] error: no retry.
    Final,
    /// The body panicked; retried like an error.
    Panic,
    /// The body ran longer than its timeout; retried like an error.
    Timeout,
    /// The stored arguments do not decode into the function's parameters: no retry.
    Decode,
    /// A `Data<T>` the body needs was not registered on the runtime: no retry.
    MissingData,
    /// The lease of the attempt expired before it reported (the instance died or hung).
    LeaseExpired,
    /// The body returned a [`Snooze`]: it runs again after the delay, the attempt not
    /// counted against `max_attempts`.
    Snoozed,
}

impl FailureKind {
    /// Whether a failure of this kind may be retried.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            FailureKind::Error
                | FailureKind::Panic
                | FailureKind::Timeout
                | FailureKind::LeaseExpired
        )
    }

    /// The word stored in `async_log.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Error => "error",
            FailureKind::Final => "final",
            FailureKind::Panic => "panic",
            FailureKind::Timeout => "timeout",
            FailureKind::Decode => "decode",
            FailureKind::MissingData => "missing_data",
            FailureKind::LeaseExpired => "lease_expired",
            FailureKind::Snoozed => "snoozed",
        }
    }
}

/// A failed execution: its kind and a message for people.
#[derive(Debug, Clone)]
pub struct Failure {
    /// What went wrong.
    pub kind: FailureKind,
    /// The error's message, as shown in `last_error` and `async_log.error`.
    pub message: String,
    /// How long a [`Snooze`] waits (`kind` is [`FailureKind::Snoozed`]).
    snooze: Option<Duration>,
}

impl Failure {
    /// A failure of the given kind.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            snooze: None,
        }
    }

    /// A [`Snooze`] as the outcome of an attempt.
    pub fn snoozed(snooze: &Snooze) -> Self {
        Failure {
            kind: FailureKind::Snoozed,
            message: snooze.to_string(),
            snooze: Some(snooze.delay),
        }
    }

    /// How long the request waits, when the body snoozed.
    pub fn snooze_delay(&self) -> Option<Duration> {
        self.snooze
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

/// The return types an executor body may have: `()`, or `Result<T, E>` for any
/// `E: Display` (`anyhow::Error`, `Box<dyn Error>`, [`Final`], your own error...).
#[diagnostic::on_unimplemented(
    message = "an #[async_exec] body must return `()` or `Result<_, E>` with `E: Display`, not `{Self}`",
    label = "this return type is not supported"
)]
pub trait IntoOutcome {
    /// Converts the body's return value into an outcome.
    fn into_outcome(self) -> Result<(), Failure>;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Result<(), Failure> {
        Ok(())
    }
}

impl<T, E: fmt::Display + 'static> IntoOutcome for Result<T, E> {
    fn into_outcome(self) -> Result<(), Failure> {
        match self {
            Ok(_) => Ok(()),
            Err(error) => {
                if let Some(snooze) = snooze_of(&error) {
                    return Err(Failure::snoozed(snooze));
                }
                let kind = if is_final(&error) {
                    FailureKind::Final
                } else {
                    FailureKind::Error
                };
                Err(Failure::new(kind, error_message(&error)))
            }
        }
    }
}

/// The [`Snooze`] an error is (directly, boxed, or anywhere in an `anyhow::Error`).
fn snooze_of<E: 'static>(error: &E) -> Option<&Snooze> {
    let any = error as &dyn Any;
    if let Some(snooze) = any.downcast_ref::<Snooze>() {
        return Some(snooze);
    }
    if let Some(error) = any.downcast_ref::<anyhow::Error>() {
        return error
            .chain()
            .find_map(|cause| cause.downcast_ref::<Snooze>());
    }
    if let Some(error) = any.downcast_ref::<Box<dyn std::error::Error + Send + Sync>>() {
        return error.downcast_ref::<Snooze>();
    }
    if let Some(error) = any.downcast_ref::<Box<dyn std::error::Error>>() {
        return error.downcast_ref::<Snooze>();
    }
    None
}

fn is_final<E: 'static>(error: &E) -> bool {
    let any = error as &dyn Any;
    if any.is::<Final>() {
        return true;
    }
    if let Some(error) = any.downcast_ref::<anyhow::Error>() {
        return error.chain().any(|cause| cause.is::<Final>());
    }
    if let Some(error) = any.downcast_ref::<Box<dyn std::error::Error + Send + Sync>>() {
        return error.is::<Final>();
    }
    if let Some(error) = any.downcast_ref::<Box<dyn std::error::Error>>() {
        return error.is::<Final>();
    }
    false
}

/// The message of an error, with its causes when it is an `anyhow::Error`.
fn error_message<E: fmt::Display + 'static>(error: &E) -> String {
    if let Some(error) = (error as &dyn Any).downcast_ref::<anyhow::Error>() {
        return format!("{error:#}");
    }
    error.to_string()
}

/// What an outcome's event tells of its request beyond the write: carried with the
/// outcome (moved from the call or the claim, never read back).
#[derive(Debug, Clone, Default)]
pub(crate) struct Subject {
    /// The idempotency key.
    pub(crate) key: Option<String>,
    /// The executor's remark.
    pub(crate) remark: &'static str,
    /// The caller's span and baggage.
    pub(crate) trace: Option<TraceContext>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_errors_are_recognised_in_every_wrapper() {
        let direct: Result<(), Final> = Err(Final::new("x"));
        assert_eq!(direct.into_outcome().unwrap_err().kind, FailureKind::Final);
        let anyhow: anyhow::Result<()> =
            Err(anyhow::Error::new(Final::new("bad")).context("outer"));
        let failure = anyhow.into_outcome().unwrap_err();
        assert_eq!(failure.kind, FailureKind::Final);
        assert_eq!(failure.message, "outer: bad");
        let boxed: Result<(), Box<dyn std::error::Error + Send + Sync>> =
            Err(Box::new(Final::new("b")));
        assert_eq!(boxed.into_outcome().unwrap_err().kind, FailureKind::Final);
        let plain: Result<(), String> = Err("retry me".into());
        assert_eq!(plain.into_outcome().unwrap_err().kind, FailureKind::Error);
        assert!(().into_outcome().is_ok());
    }

    #[test]
    fn snoozes_are_recognised_in_every_wrapper() {
        let snooze = || Snooze::new(Duration::from_secs(30), "429");
        let direct: Result<(), Snooze> = Err(snooze());
        let failure = direct.into_outcome().unwrap_err();
        assert_eq!(failure.kind, FailureKind::Snoozed);
        assert_eq!(failure.snooze_delay(), Some(Duration::from_secs(30)));
        assert_eq!(failure.message, "snoozed for 30s: 429");
        let anyhow: anyhow::Result<()> = Err(anyhow::Error::new(snooze()).context("crm"));
        assert_eq!(
            anyhow.into_outcome().unwrap_err().kind,
            FailureKind::Snoozed
        );
        let boxed: Result<(), Box<dyn std::error::Error + Send + Sync>> = Err(Box::new(snooze()));
        assert_eq!(boxed.into_outcome().unwrap_err().kind, FailureKind::Snoozed);
        assert!(!FailureKind::Snoozed.is_retryable());
        let long = Snooze::new(Duration::MAX, "x");
        assert_eq!(long.delay(), MAX_SNOOZE);
    }
}
