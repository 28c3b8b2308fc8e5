//! Wake-ups between instances on PostgreSQL: a `LISTEN` on a connection of its own,
//! forwarded as ticks to the producer, reconnected with a backoff when it drops.

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::mpsc;

use super::{BACKOFF_MAX, BACKOFF_MIN, CHANNEL};

/// A listener on its own one-connection pool (so that it never takes a connection of the
/// store's pool), subscribed to [`CHANNEL`].
pub(super) struct Listening {
    listener: PgListener,
    pool: PgPool,
}

impl Listening {
    pub(super) async fn connect(store_pool: &PgPool) -> std::result::Result<Self, sqlx::Error> {
        let options = (*store_pool.connect_options()).clone();
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(BACKOFF_MAX)
            .connect_lazy_with(options);
        let subscribed = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            // The pool is this listener's alone, and only `close` closes it.
            listener.ignore_pool_close_event(true);
            listener.listen(CHANNEL).await?;
            Ok(listener)
        }
        .await;
        match subscribed {
            Ok(listener) => Ok(Listening { listener, pool }),
            Err(error) => {
                pool.close().await;
                Err(error)
            }
        }
    }

    /// Closes the connection now (a lingering one would keep the database busy).
    pub(super) async fn close(self) {
        drop(self.listener);
        self.pool.close().await;
    }
}

/// Sends one wake-up unless one is pending already; `false` when nobody receives them any more.
pub(super) fn wake(tx: &mpsc::Sender<()>) -> bool {
    !matches!(tx.try_send(()), Err(mpsc::error::TrySendError::Closed(())))
}

/// Forwards the wake-ups for `application` not sent by `owner` until the receiver of `tx`
/// is dropped. Without a listener (it could not connect, or its connection failed), it
/// connects again with a backoff, then sends one wake-up for what the gap may have hidden.
pub(super) async fn forward_wakes(
    store_pool: PgPool,
    mut listening: Option<Listening>,
    application: String,
    owner: String,
    tx: mpsc::Sender<()>,
) {
    #[derive(serde::Deserialize)]
    struct Received {
        app: String,
        owner: String,
    }

    loop {
        let Some(current) = listening.as_mut() else {
            let mut delay = BACKOFF_MIN;
            let connected = loop {
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                match Listening::connect(&store_pool).await {
                    Ok(connected) => break connected,
                    Err(error) => {
                        delay = (delay * 2).min(BACKOFF_MAX);
                        crate::log::warn!(
                            error = %crate::log::escaped(&error),
                            retry_in_ms = delay.as_millis() as u64,
                            "async-exec: could not connect the PostgreSQL LISTEN connection"
                        );
                    }
                }
            };
            crate::log::info!("async-exec: the PostgreSQL LISTEN connection is back");
            listening = Some(connected);
            if !wake(&tx) {
                break;
            }
            continue;
        };
        let received = tokio::select! {
            _ = tx.closed() => break,
            received = current.listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => {
                let Ok(received) = serde_json::from_str::<Received>(notification.payload()) else {
                    crate::log::debug!(
                        payload = notification.payload(),
                        "async-exec: ignored a notification that is not a wake-up"
                    );
                    continue;
                };
                if received.app == application && received.owner != owner && !wake(&tx) {
                    break;
                }
            }
            Ok(None) => {
                // Lost and re-connected already: notifications sent in between are gone.
                crate::log::warn!(
                    "async-exec: the PostgreSQL LISTEN connection was lost and re-established"
                );
                if !wake(&tx) {
                    break;
                }
            }
            Err(error) => {
                crate::log::warn!(
                    error = %crate::log::escaped(&error),
                    "async-exec: the PostgreSQL LISTEN connection failed; re-connecting"
                );
                if let Some(failed) = listening.take() {
                    failed.close().await;
                }
            }
        }
    }
    if let Some(listening) = listening {
        listening.close().await;
    }
}
