//! The sweeps: what runs on an interval beside the work. The `retrier` (due retries and
//! delayed records), the `compensator` (records never dispatched, expired keys), the
//! `rescuer` (expired leases), the `heartbeat` (renews this instance's leases), the
//! `retention` sweep (finished records and old logs past `retention`, through `purge`),
//! presence (`instances`: this instance's announcement and the skip list of a rolling
//! deploy), the database's `clock`, and `stops` (cancels of running requests and passed
//! deadlines); `sweep` is the loop every interval sweep runs in.

pub(crate) mod clock;
pub(crate) mod compensator;
pub(crate) mod heartbeat;
pub(crate) mod instances;
pub(crate) mod purge;
pub(crate) mod rescuer;
pub(crate) mod retention;
pub(crate) mod retrier;
pub(crate) mod stops;
pub(crate) mod sweep;
