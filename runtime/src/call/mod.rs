//! The call: what an `#[async_exec]` function's call does in the caller's task. The
//! call `builder` it returns (`Call`, `CallIn`, `Batch`) and its `receipt` (`Receipt`,
//! `Outcome`; the `Submission` it hands on),
//! `submit` (writing the record, then dispatching or running it), transactions (`tx`:
//! `Tx` and `rt.begin()`; `scope`: `rt.transaction` scopes; `open_tx`: bare calls refused
//! while a `Tx` is open; `nested`: calls made inside a running body; `cancel`: a cancel
//! in a transaction, the caller's or a scope's), idempotency `keys`, the `modes` that
//! merge a call with earlier ones,
//! and the `delayed` in-memory calls.

pub(crate) mod builder;
pub(crate) mod cancel;
pub(crate) mod delayed;
pub(crate) mod hand_over;
pub(crate) mod keys;
pub(crate) mod modes;
pub(crate) mod nested;
pub(crate) mod open_tx;
pub(crate) mod quota;
pub(crate) mod receipt;
pub(crate) mod reserved;
pub(crate) mod scope;
pub(crate) mod submit;
pub(crate) mod tx;
