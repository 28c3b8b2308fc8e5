//! What a body returns, kept: the JSON of a body's `Ok` value (`Result<T, E>` with
//! `T: Serialize`), written with its record when the record is kept
//! (`delete_on_success(false)`) and read back with
//! [`Runtime::result`](crate::Runtime::result); [`Partial`], the value of batch work
//! where some items failed.
//!
//! The macro's code takes the value's JSON through [`ResultOf`]: when `T` serializes, the
//! method of [`KeepJson`] (on `&ResultOf`) is found first; otherwise that of [`NoJson`]
//! (on `ResultOf`), which keeps nothing. A body returning `()` or `Result<(), E>` keeps
//! nothing either.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// The value of batch work where some items failed: how many went through, how many did
/// not, and what you want to remember of them. The request succeeded (it is not run
/// again: retry the failed items as requests of their own, if they should be); the
/// value is kept with its record and read with [`Runtime::result`](crate::Runtime::result).
///
/// ```
/// use async_exec::{async_exec, Partial};
///
/// #[async_exec(type = SaveAsync)]
/// async fn import(rows: Vec<String>) -> anyhow::Result<Partial> {
///     let (mut ok, mut bad) = (0, Vec::new());
///     for row in &rows {
///         if row.contains(',') { ok += 1 } else { bad.push(row.clone()) }
///     }
///     Ok(Partial::new(ok, bad.len() as u64, serde_json::json!({ "rejected": bad })))
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
pub struct Partial {
    /// Items that went through.
    pub ok: u64,
    /// Items that did not.
    pub failed: u64,
    /// What to remember of them (JSON).
    pub details: serde_json::Value,
}

impl Partial {
    /// `ok` items went through, `failed` did not; `details` (any JSON value) says more.
    pub fn new(ok: u64, failed: u64, details: serde_json::Value) -> Self {
        Partial {
            ok,
            failed,
            details,
        }
    }
}

/// Where a body's code leaves the JSON of its value, for the executor to write.
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct ResultSlot(Arc<OnceLock<String>>);

impl ResultSlot {
    /// Keeps `json` (the first value given; `None` keeps nothing).
    pub fn keep(&self, json: Option<String>) {
        if let Some(json) = json {
            let _ = self.0.set(json);
        }
    }

    /// What was kept.
    pub(crate) fn take(&self) -> Option<String> {
        self.0.get().cloned()
    }
}

/// A body's return value, looked at by reference (see the [module docs](self)).
#[doc(hidden)]
pub struct ResultOf<'a, T>(pub &'a T);

impl<T> std::fmt::Debug for ResultOf<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResultOf(..)")
    }
}

/// The JSON of an `Ok` value that serializes (`None` for `()`/`null` and errors).
#[doc(hidden)]
pub trait KeepJson {
    fn __result_json(&self) -> Option<String>;
}

impl<T: Serialize, E> KeepJson for &ResultOf<'_, Result<T, E>> {
    fn __result_json(&self) -> Option<String> {
        match self.0 {
            Ok(value) => serde_json::to_string(value).ok().filter(|j| j != "null"),
            Err(_) => None,
        }
    }
}

/// Anything else keeps nothing.
#[doc(hidden)]
pub trait NoJson {
    fn __result_json(&self) -> Option<String>;
}

impl<T> NoJson for ResultOf<'_, T> {
    fn __result_json(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Opaque;

    #[test]
    // The two `&` choose between the traits: that is the point.
    #[allow(clippy::needless_borrow)]
    fn only_ok_values_that_serialize_are_kept() {
        let value: Result<Partial, String> = Ok(Partial::new(3, 1, serde_json::json!(["x"])));
        assert_eq!(
            (&&ResultOf(&value)).__result_json().as_deref(),
            Some(r#"{"ok":3,"failed":1,"details":["x"]}"#)
        );
        let unit: Result<(), String> = Ok(());
        assert_eq!((&&ResultOf(&unit)).__result_json(), None);
        let failed: Result<u32, String> = Err("no".into());
        assert_eq!((&&ResultOf(&failed)).__result_json(), None);
        let opaque: Result<Opaque, String> = Ok(Opaque);
        assert_eq!((&&ResultOf(&opaque)).__result_json(), None);
        assert_eq!((&&ResultOf(&())).__result_json(), None);
    }
}
