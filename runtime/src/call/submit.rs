//! What happens at a call, strategy by strategy: its record written (alone, in a batch,
//! in the caller's transaction or in its own), its key and quotas checked; what follows
//! the commit is in [`super::hand_over`].

use std::sync::Arc;

use crate::base::error::Result;
use crate::base::record::{Inserted, NewRequest, RequestId};
use crate::base::strategy::Strategy;
use crate::call::delayed::DELAY_SLACK_MS;
use crate::call::quota::Quota;
use crate::call::receipt::{Outcome, Receipt, Submission};
use crate::call::tx::Tx;
use crate::runtime::Inner;
use crate::store::{Backend, StoredKey};
use crate::work::dispatcher::stored_job;
use crate::work::executor::Job;

impl Submission {
    pub(crate) fn job(&self) -> Job {
        Job {
            def: self.def,
            params: self.params.clone(),
            trace: self.trace.clone(),
            delay: self.delay,
            record: None,
            due: None,
        }
    }

    /// Due now, or after the delay counted from the database's latest possible now, so
    /// that a delay never ends early by the clock reading's round trip, and
    /// [`DELAY_SLACK_MS`] more, which covers the time until the commit returns.
    fn run_at(&self, inner: &Inner, now: i64) -> i64 {
        match self.delay_ms() {
            None => now,
            Some(delay) => inner
                .clock
                .latest_ms()
                .saturating_add(delay)
                .saturating_add(DELAY_SLACK_MS),
        }
    }

    /// The delay in milliseconds, if any.
    fn delay_ms(&self) -> Option<i64> {
        self.delay
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    pub(crate) fn request(&self, inner: &Inner) -> NewRequest {
        self.request_at(inner, inner.now_ms())
    }

    /// Its record, written at `now` (the calls of a batch share one reading of the clock,
    /// so that their rows share the timestamps and bind them once).
    pub(crate) fn request_at(&self, inner: &Inner, now: i64) -> NewRequest {
        let mut request = inner.new_request(
            self.def,
            self.params.clone(),
            self.key.clone(),
            self.priority,
            self.run_at(inner, now),
            self.trace.as_ref(),
        );
        request.now = now;
        request.tags = self.tags.clone();
        request.partition = self.partition.clone();
        self.merge_keys(inner.claimer.queue_plan(), &mut request);
        request.deadline_at = self
            .deadline
            .map(|deadline| now.saturating_add(deadline.as_millis() as i64));
        if self.delay.is_none() {
            request.notify = Some(inner.owner.clone());
        }
        request
    }
}

/// Whether a call writes in the caller's transaction at the call (`SaveAsync`, and
/// `SyncSave`'s key and failure record).
pub(crate) fn writes(call: &Submission) -> bool {
    matches!(call.def.strategy, Strategy::SaveAsync | Strategy::SyncSave)
}

/// Settles the places a call (or a batch) outside any transaction reserved: committed
/// when its write succeeded or may have ([`crate::Error::Unconfirmed`]), else given back.
async fn settle_alone<T>(held: crate::call::quota::Held, submitted: &Result<T>) {
    let committed = match submitted {
        Ok(_) => true,
        Err(error) => matches!(error, crate::Error::Unconfirmed { .. }),
    };
    held.settle(committed).await;
}

/// Calls with their position in a batch.
type Numbered = Vec<(usize, Submission)>;

/// The store writes of a submission, outside or inside the caller's transaction.
trait Writer {
    async fn insert(&mut self, inner: &Inner, request: &NewRequest) -> Result<Inserted>;
    async fn insert_many(
        &mut self,
        inner: &Inner,
        requests: &[NewRequest],
    ) -> Result<Vec<Inserted>>;
    /// The idempotency key, unless it expired, as this writer sees it.
    async fn find_key(&mut self, inner: &Inner, key: &str) -> Result<Option<StoredKey>>;
    /// Records the key of a `SyncSave` call whose body ran, unless it is taken.
    async fn record_key(&mut self, inner: &Inner, request: &NewRequest) -> Result<()>;
    /// Called with the jobs to run once the data is committed.
    async fn after_commit(&mut self, inner: &Arc<Inner>, jobs: Vec<Job>);
    /// A delayed record written due at `due` (unix ms) for a delay of `delay_ms`: in a
    /// transaction, its delay is moved to count from the commit.
    fn delayed(&mut self, id: RequestId, due: i64, delay_ms: i64) {
        let _ = (id, due, delay_ms);
    }
    fn in_transaction(&self) -> bool;
    /// Checks, before writing, that `quotas` (each with how many requests would be added
    /// under it) are kept; only a transaction can (autocommit calls under a quota are
    /// made in one: [`Inner::submit_under_quota`]).
    async fn check_quotas(&mut self, inner: &Inner, quotas: &[(Quota, u64)]) -> Result<()>;
    /// Notes requests written under `quota`.
    fn quota_added(&mut self, quota: &Quota, n: u64);
}

/// Writes outside any transaction. `reserved`: the places of the calls under quotas were
/// reserved before ([`crate::call::quota::reserve`]).
struct Autocommit {
    reserved: bool,
}

/// A write outside any transaction that may have taken effect although it failed
/// ([`Error::leaves_write_unknown`](crate::Error)), said so: [`crate::Error::Unconfirmed`].
fn unconfirmed(executor: &'static str, error: crate::Error) -> crate::Error {
    if error.leaves_write_unknown() {
        crate::Error::Unconfirmed {
            executor,
            cause: Box::new(error),
        }
    } else {
        error
    }
}

/// SQLite's "database is locked", said with its likely cause and fix.
fn explain_lock(inner: &Inner, error: crate::Error) -> crate::Error {
    if error.is_sqlite_busy() {
        crate::Error::SqliteLocked {
            waited: inner.settings.sqlite_busy_timeout,
        }
    } else {
        error
    }
}

impl Writer for Autocommit {
    async fn insert(&mut self, inner: &Inner, request: &NewRequest) -> Result<Inserted> {
        let inserted = inner.store.request_insert(request).await;
        inserted.map_err(|e| unconfirmed(request.executor, explain_lock(inner, e)))
    }
    async fn insert_many(
        &mut self,
        inner: &Inner,
        requests: &[NewRequest],
    ) -> Result<Vec<Inserted>> {
        let inserted = inner.store.request_insert_many(requests).await;
        let executor = requests.first().map_or("(empty batch)", |r| r.executor);
        inserted.map_err(|e| unconfirmed(executor, explain_lock(inner, e)))
    }
    async fn find_key(&mut self, inner: &Inner, key: &str) -> Result<Option<StoredKey>> {
        let found = inner.store.key_find(&inner.app, key, inner.now_ms()).await;
        found.map_err(|e| explain_lock(inner, e))
    }
    async fn record_key(&mut self, inner: &Inner, request: &NewRequest) -> Result<()> {
        let recorded = inner.store.key_record(request).await;
        recorded.map_err(|e| explain_lock(inner, e))
    }
    async fn after_commit(&mut self, inner: &Arc<Inner>, jobs: Vec<Job>) {
        inner.after_commit(jobs).await;
    }
    fn in_transaction(&self) -> bool {
        false
    }
    async fn check_quotas(&mut self, _inner: &Inner, quotas: &[(Quota, u64)]) -> Result<()> {
        debug_assert!(
            self.reserved || quotas.is_empty(),
            "calls under a quota reserve their places first, or are made in a transaction"
        );
        Ok(())
    }
    fn quota_added(&mut self, _quota: &Quota, _n: u64) {}
}

impl<DB: Backend> Writer for Tx<DB> {
    async fn insert(&mut self, _inner: &Inner, request: &NewRequest) -> Result<Inserted> {
        let inserted = DB::insert_in(self.raw_conn(), request).await;
        self.noting(inserted)
    }
    async fn insert_many(
        &mut self,
        _inner: &Inner,
        requests: &[NewRequest],
    ) -> Result<Vec<Inserted>> {
        let inserted = DB::insert_many_in(self.raw_conn(), requests).await;
        self.noting(inserted)
    }
    async fn find_key(&mut self, inner: &Inner, key: &str) -> Result<Option<StoredKey>> {
        let found = DB::key_find_in(self.raw_conn(), &inner.app, key, inner.now_ms()).await;
        self.noting(found)
    }
    async fn record_key(&mut self, _inner: &Inner, request: &NewRequest) -> Result<()> {
        let recorded = DB::key_record_in(self.raw_conn(), request).await;
        self.noting(recorded)
    }
    async fn after_commit(&mut self, _inner: &Arc<Inner>, jobs: Vec<Job>) {
        self.pending.extend(jobs);
    }
    fn delayed(&mut self, id: RequestId, due: i64, delay_ms: i64) {
        self.delayed.push((id, due, delay_ms));
    }
    fn in_transaction(&self) -> bool {
        true
    }
    async fn check_quotas(&mut self, inner: &Inner, quotas: &[(Quota, u64)]) -> Result<()> {
        if !inner.quotas_reserve() {
            return crate::call::quota::check(inner, self, quotas).await;
        }
        // On a connection of the pool's, not in this transaction: no lock of it lasts
        // until the commit.
        let inner = self.inner.clone();
        let held = crate::call::quota::reserve(&inner, quotas).await?;
        self.quota_held.absorb(held);
        Ok(())
    }
    fn quota_added(&mut self, quota: &Quota, n: u64) {
        Tx::quota_added(self, &quota.key, n);
    }
}

impl Inner {
    /// Seals the `#[secret]` arguments of `call`: every call passes here (alone, in a
    /// transaction, in a batch or a scope) before it runs or is written, so its record,
    /// and a `SyncSave`/`AsyncSave` failure record, never holds them in plaintext. A
    /// trailing debounce's window becomes its delay here too.
    pub(crate) fn seal(&self, call: &mut Submission) -> Result<()> {
        if !call.sealed && !call.def.secrets.is_empty() {
            call.params = self.settings.secrets.seal(call.def, &call.params)?.into();
        }
        call.sealed = true;
        call.apply_debounce_delay();
        Ok(())
    }

    /// Whether a `SaveAsync` call whose record could not be written may run in memory
    /// instead: only when asked for (`degrade_to_memory`), outside a transaction, without
    /// an idempotency key (a keyed call may exist already, committed by someone else), and
    /// only when the error proves nothing was written (else it may run twice).
    fn may_degrade(&self, call: &Submission, in_transaction: bool, error: &crate::Error) -> bool {
        self.settings.degrade_to_memory
            && !in_transaction
            && call.key.is_none()
            && error.proves_nothing_written()
    }

    /// A call outside any transaction.
    pub(crate) async fn submit(self: &Arc<Self>, call: Submission) -> Result<Receipt> {
        self.check_open()?;
        let quotas = self.quotas_of(&call);
        if quotas.is_empty() {
            return self
                .submit_with(call, &mut Autocommit { reserved: false })
                .await;
        }
        if !self.quotas_reserve() {
            let mut receipts = self.submit_under_quota(vec![call], false).await?;
            return Ok(receipts.remove(0));
        }
        let quotas: Vec<(Quota, u64)> = quotas.into_iter().map(|q| (q, 1)).collect();
        let held = crate::call::quota::reserve(self, &quotas).await?;
        let submitted = self
            .submit_with(call, &mut Autocommit { reserved: true })
            .await;
        settle_alone(held, &submitted).await;
        submitted
    }

    /// A call inside the caller's transaction.
    pub(crate) async fn submit_in<DB: Backend>(
        self: &Arc<Self>,
        call: Submission,
        tx: &mut Tx<DB>,
    ) -> Result<Receipt> {
        self.check_open()?;
        if writes(&call) {
            tx.check_before_write().await?;
        }
        let submitted = self.submit_with(call, tx).await;
        submitted.map_err(DB::explain)
    }

    async fn submit_with(
        self: &Arc<Self>,
        mut call: Submission,
        writer: &mut impl Writer,
    ) -> Result<Receipt> {
        self.seal(&mut call)?;
        crate::operate::metrics::submitted(call.def);
        match call.def.strategy {
            Strategy::SaveAsync => {
                let request = call.request(self);
                let quotas: Vec<(Quota, u64)> =
                    self.quotas_of(&call).into_iter().map(|q| (q, 1)).collect();
                if !quotas.is_empty() {
                    writer.check_quotas(self, &quotas).await?;
                }
                match writer.insert(self, &request).await {
                    Ok(Inserted::New(id)) => {
                        for (quota, n) in &quotas {
                            writer.quota_added(quota, *n);
                        }
                        if let Some(delay_ms) = call.delay_ms() {
                            writer.delayed(id, request.run_at, delay_ms);
                        }
                        // A delayed one gets a timer after the commit.
                        let job = stored_job(call.job(), id, call.key.take(), request.deadline_at);
                        writer.after_commit(self, vec![job]).await;
                        Ok(Receipt::new(Some(id), Outcome::Queued))
                    }
                    Ok(Inserted::Existing(id)) => Ok(Receipt::new(id, Outcome::Existing)),
                    Ok(Inserted::Live(id)) => Ok(Receipt::new(Some(id), Outcome::Live)),
                    Ok(Inserted::Merged(id)) => Ok(Receipt::new(Some(id), Outcome::Debounced)),
                    Err(error) if self.may_degrade(&call, writer.in_transaction(), &error) => {
                        crate::log::error!(executor = call.def.name, error = %crate::log::escaped(&error),
                            "could not persist the request: running it in memory only; a crash now loses it");
                        writer.after_commit(self, vec![call.job()]).await;
                        Ok(Receipt::new(
                            None,
                            Outcome::Degraded {
                                error: error.to_string(),
                            },
                        ))
                    }
                    Err(error) => Err(error),
                }
            }
            Strategy::SyncSave => {
                // The key first: a known key does not run the body again. (Not a lock: two
                // calls at the same moment may both run it; one record is written.)
                if let Some(key) = &call.key {
                    if let Some(known) = writer.find_key(self, key).await? {
                        return Ok(Receipt::new(known.request_id, Outcome::Existing));
                    }
                }
                let job = call.job();
                let attempt = self.executor.run_body(&job).await;
                let failed =
                    self.executor
                        .failure_record(&job, &attempt, call.key.clone(), call.priority);
                match failed {
                    None => {
                        if call.key.is_some() {
                            // Remember the key, so that a retried call does not run again.
                            // The body ran whatever happens here: the receipt says so.
                            if let Err(error) = writer.record_key(self, &call.request(self)).await {
                                crate::log::error!(executor = call.def.name, error = %crate::log::escaped(&error),
                                    "SyncSave body ran but its idempotency key could not be recorded: a call with the key runs it again");
                            }
                        }
                        Ok(Receipt::new(None, Outcome::Ran))
                    }
                    Some(request) => {
                        let error = request
                            .log
                            .as_ref()
                            .and_then(|l| l.error.clone())
                            .unwrap_or_default();
                        let id = writer.insert(self, &request).await?.id();
                        Ok(Receipt::new(id, Outcome::Deferred { error }))
                    }
                }
            }
            Strategy::AsyncSave | Strategy::Async | Strategy::Thread => {
                writer.after_commit(self, vec![call.job()]).await;
                Ok(Receipt::new(None, Outcome::InMemory))
            }
        }
    }

    /// Many calls outside any transaction: the records of `SaveAsync` calls are written
    /// together, in one transaction.
    pub(crate) async fn submit_batch(
        self: &Arc<Self>,
        calls: Vec<Submission>,
    ) -> Result<Vec<Receipt>> {
        self.check_open()?;
        let mut quotas: Vec<(Quota, u64)> = Vec::new();
        for call in &calls {
            for quota in self.quotas_of(call) {
                match quotas.iter_mut().find(|(q, _)| q.key == quota.key) {
                    Some((_, n)) => *n += 1,
                    None => quotas.push((quota, 1)),
                }
            }
        }
        if quotas.is_empty() {
            return self
                .submit_batch_with(calls, &mut Autocommit { reserved: false })
                .await;
        }
        if !self.quotas_reserve() {
            return self.submit_under_quota(calls, true).await;
        }
        let held = crate::call::quota::reserve(self, &quotas).await?;
        let submitted = self
            .submit_batch_with(calls, &mut Autocommit { reserved: true })
            .await;
        settle_alone(held, &submitted).await;
        submitted
    }

    /// Many calls inside the caller's transaction.
    pub(crate) async fn submit_batch_in<DB: Backend>(
        self: &Arc<Self>,
        calls: Vec<Submission>,
        tx: &mut Tx<DB>,
    ) -> Result<Vec<Receipt>> {
        self.check_open()?;
        if calls.iter().any(writes) {
            tx.check_before_write().await?;
        }
        let submitted = self.submit_batch_with(calls, tx).await;
        submitted.map_err(DB::explain)
    }

    /// [`submit_batch_in`](Inner::submit_batch_in) for a caller that checked the
    /// transaction already ([`Tx::check_before_write`]).
    pub(crate) async fn submit_batch_checked_in<DB: Backend>(
        self: &Arc<Self>,
        calls: Vec<Submission>,
        tx: &mut Tx<DB>,
    ) -> Result<Vec<Receipt>> {
        self.check_open()?;
        let submitted = self.submit_batch_with(calls, tx).await;
        submitted.map_err(DB::explain)
    }

    async fn submit_batch_with(
        self: &Arc<Self>,
        calls: Vec<Submission>,
        writer: &mut impl Writer,
    ) -> Result<Vec<Receipt>> {
        let mut calls = calls;
        for call in &mut calls {
            self.seal(call)?;
        }
        let (stored, others): (Numbered, Numbered) = calls
            .into_iter()
            .enumerate()
            .partition(|(_, call)| call.def.strategy == Strategy::SaveAsync);
        let mut receipts: Vec<Option<Receipt>> = vec![None; stored.len() + others.len()];
        if !stored.is_empty() {
            for (_, call) in &stored {
                crate::operate::metrics::submitted(call.def);
            }
            let now = self.now_ms();
            let requests: Vec<NewRequest> = stored
                .iter()
                .map(|(_, call)| call.request_at(self, now))
                .collect();
            // Every quota the batch's calls are under, with how many of them it adds.
            let mut quotas: Vec<(Quota, u64)> = Vec::new();
            for (_, call) in &stored {
                for quota in self.quotas_of(call) {
                    match quotas.iter_mut().find(|(q, _)| q.key == quota.key) {
                        Some((_, n)) => *n += 1,
                        None => quotas.push((quota, 1)),
                    }
                }
            }
            if !quotas.is_empty() {
                writer.check_quotas(self, &quotas).await?;
            }
            let inserted = writer.insert_many(self, &requests).await?;
            for (quota, n) in &quotas {
                writer.quota_added(quota, *n);
            }
            let mut jobs = Vec::with_capacity(stored.len());
            for (((i, mut call), inserted), request) in
                stored.into_iter().zip(inserted).zip(&requests)
            {
                receipts[i] = Some(match inserted {
                    Inserted::New(id) => {
                        if let Some(delay_ms) = call.delay_ms() {
                            writer.delayed(id, request.run_at, delay_ms);
                        }
                        // A delayed one gets a timer after the commit.
                        jobs.push(stored_job(
                            call.job(),
                            id,
                            call.key.take(),
                            request.deadline_at,
                        ));
                        Receipt::new(Some(id), Outcome::Queued)
                    }
                    Inserted::Existing(id) => Receipt::new(id, Outcome::Existing),
                    Inserted::Live(id) => Receipt::new(Some(id), Outcome::Live),
                    Inserted::Merged(id) => Receipt::new(Some(id), Outcome::Debounced),
                });
            }
            writer.after_commit(self, jobs).await;
        }
        for (i, call) in others {
            receipts[i] = Some(self.submit_with(call, writer).await?);
        }
        Ok(receipts
            .into_iter()
            .map(|r| r.expect("every call has a receipt"))
            .collect())
    }
}
