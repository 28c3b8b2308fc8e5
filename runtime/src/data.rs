//! `Data<T>`: values registered on the runtime builder and injected into executor bodies.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A shared value injected into an executor body at execution time.
///
/// Parameters of type `Data<T>` are not persisted and not part of the call: the runtime
/// hands over the value registered with [`Builder::data`](crate::Builder::data).
///
/// ```ignore
/// #[async_exec(type = SaveAsync)]
/// async fn send_welcome(email: String, mailer: Data<Mailer>) -> anyhow::Result<()> {
///     mailer.send(&email, "welcome").await
/// }
/// ```
pub struct Data<T: ?Sized>(Arc<T>);

impl<T> Data<T> {
    /// Wraps a value.
    pub fn new(value: T) -> Self {
        Data(Arc::new(value))
    }
}

impl<T: ?Sized> Data<T> {
    /// The shared pointer behind this value.
    pub fn into_arc(self) -> Arc<T> {
        self.0
    }
}

impl<T: ?Sized> Clone for Data<T> {
    fn clone(&self) -> Self {
        Data(self.0.clone())
    }
}

impl<T: ?Sized> Deref for Data<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Data<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// The values registered on a runtime, by type.
#[derive(Default, Clone)]
pub(crate) struct DataMap {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for DataMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataMap")
            .field("len", &self.values.len())
            .finish()
    }
}

impl DataMap {
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: Arc<T>) {
        self.values.insert(TypeId::of::<T>(), value);
    }

    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<Data<T>> {
        let value = self.values.get(&TypeId::of::<T>())?.clone();
        value.downcast::<T>().ok().map(Data)
    }
}
