//! Looking a request up by its idempotency key.

use serde::{Deserialize, Serialize};

use crate::base::error::Result;
use crate::base::record::{Request, RequestId};
use crate::runtime::Runtime;

/// What an idempotency key names, from [`Runtime::find_by_key`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KeyInfo {
    /// The key.
    pub key: String,
    /// The request the key names: the one written by the first call with the key. `None`
    /// when that call was a `SyncSave` call whose body ran at once (no record is written
    /// for a success).
    pub request_id: Option<RequestId>,
    /// When the key was first used (unix milliseconds).
    pub first_used: i64,
    /// Until when the key protects (unix milliseconds): `first_used` plus the
    /// `key_retention` of the runtime that wrote it.
    pub expires: i64,
    /// The request's record, while it exists: it is gone once deleted on success
    /// (`delete_on_success`) or by an operator, while the key still protects.
    pub request: Option<Request>,
}

impl Runtime {
    /// The request that an idempotency key of this application names, unless the key is
    /// unknown or its retention has passed (then a call with it writes a new request).
    ///
    /// ```no_run
    /// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
    /// if let Some(info) = rt.find_by_key("order-42").await? {
    ///     match &info.request {
    ///         Some(request) => println!("request {} is {}", request.id, request.status),
    ///         None => println!("request {:?} is done and gone", info.request_id),
    ///     }
    ///     println!("the key protects until {} (unix ms)", info.expires);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn find_by_key(&self, key: &str) -> Result<Option<KeyInfo>> {
        let inner = &self.inner;
        let Some(stored) = inner
            .store
            .key_find(&inner.app, key, inner.now_ms())
            .await?
        else {
            return Ok(None);
        };
        let request = match stored.request_id {
            Some(id) => inner.store.request_get(&inner.app, id).await?,
            None => None,
        };
        Ok(Some(KeyInfo {
            key: key.to_owned(),
            request_id: stored.request_id,
            first_used: stored.create_time,
            expires: stored.expire_time,
            request,
        }))
    }
}
