//! An idempotency key as the store holds it, and what claiming one found.

use crate::base::record::RequestId;

/// An idempotency key as `async_key` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredKey {
    /// The request it names; `None` for a `SyncSave` call whose body ran at once.
    pub(crate) request_id: Option<RequestId>,
    /// First used (unix ms).
    pub(crate) create_time: i64,
    /// Protects until then (unix ms).
    pub(crate) expire_time: i64,
}

/// The `request_id` of a key whose transaction has claimed it and not yet written its
/// request. It is replaced before the transaction commits.
pub(crate) const KEY_PENDING: RequestId = -1;

/// Expired keys deleted per pass of the compensation sweep.
pub(crate) const KEY_SWEEP_BATCH: i64 = 1000;

/// What claiming a key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyClaim {
    /// The key was free (or expired): this transaction holds it, with [`KEY_PENDING`].
    Ours,
    /// The key is in use and has not expired: the request it names.
    Taken(Option<RequestId>),
}

impl KeyClaim {
    /// Reads the `request_id` that a key holds after this transaction's claim statement.
    pub(crate) fn from_request_id(request_id: Option<RequestId>) -> Self {
        match request_id {
            Some(KEY_PENDING) => KeyClaim::Ours,
            other => KeyClaim::Taken(other),
        }
    }
}
