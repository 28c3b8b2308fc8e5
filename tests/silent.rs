//! Issue 18, item 2: a connection that goes silent. Established connections to the
//! database stop answering for ever while new ones work (a failover that moved an address,
//! a firewall or conntrack flush: the proxy's `black_hole`). The outcomes of bodies that
//! ran are still written, on new connections, within a bound, and no body runs twice;
//! `health()` is degraded while an outcome waits too long to be written, and ok again
//! after; `shutdown()` returns within its grace plus a bound. PostgreSQL and MariaDB
//! (SQLite has no network).

// Without a server URL set, the suites are ignored and the tests below unused.
#![cfg_attr(
    not(any(async_exec_test_postgres, async_exec_test_mysql)),
    allow(dead_code, unused_imports)
)]

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use async_exec::{async_exec, Context, Data, HealthStatus, Runtime};
use common::proxy::Proxy;
use common::{Probe, TestDb};

/// Lease of the runtimes here: every statement the runtime issues is bounded by a
/// quarter of it (1 s).
const LEASE: Duration = Duration::from_secs(4);

/// The bound on one statement, for a lease of [`LEASE`].
const STATEMENT_BOUND: Duration = Duration::from_secs(1);

/// Holds bodies until opened.
#[derive(Debug)]
struct Gate(tokio::sync::Semaphore);

impl Default for Gate {
    fn default() -> Self {
        Gate(tokio::sync::Semaphore::new(0))
    }
}

impl Gate {
    fn open(&self) {
        self.0.add_permits(1_000);
    }
}

#[async_exec(type = SaveAsync, max_attempts = 5, timeout = "1m")]
async fn gated(label: String, gate: Data<Gate>, probe: Data<Probe>, ctx: Context) {
    probe.record(&label, ctx.attempt());
    let _passed = gate.0.acquire().await;
}

const BODIES: usize = 6;

fn label(i: usize) -> String {
    format!("body{i}")
}

/// A runtime on `url` with the short lease, `BODIES` gated bodies started and holding
/// their leases.
async fn started_bodies(db: &TestDb, url: &str) -> Runtime {
    let rt = db
        .builder()
        .database_url(url)
        .lease(LEASE)
        .heartbeat_interval(Duration::from_secs(1))
        .shutdown_grace(Duration::from_secs(1))
        .concurrency(BODIES)
        .data(Gate::default())
        .data(StepEnds::default())
        .start()
        .await
        .unwrap();
    for i in 0..BODIES {
        gated(label(i)).on(&rt).await.unwrap();
    }
    let probe = rt.data::<Probe>().unwrap();
    for i in 0..BODIES {
        probe
            .wait_runs_within(&label(i), 1, Duration::from_secs(20))
            .await;
    }
    rt
}

/// Waits until no record is left unwritten (the bodies' outcomes deleted them), for at
/// most `limit`; returns how long it took.
async fn outcomes_written_within(db: &TestDb, limit: Duration) -> Duration {
    let began = Instant::now();
    loop {
        let left = db.count("async_req").await;
        if left == 0 {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < limit,
            "{left} outcome(s) still unwritten after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (a) Bodies ran; then every established connection goes silent. Their outcomes are
/// written on new connections within a few statement bounds (not after the kernel gives
/// up, ~15 minutes), and no body runs twice, not even after another lease.
async fn outcomes_are_written_when_established_connections_go_silent(db: TestDb) {
    let (proxy, url) = Proxy::for_url(&db.url).await;
    let rt = started_bodies(&db, &url).await;
    proxy.black_hole();
    rt.data::<Gate>().unwrap().open();
    let took = outcomes_written_within(&db, STATEMENT_BOUND * 10).await;
    eprintln!("outcomes written {took:?} after the black hole");
    // Another lease: a body whose lease ran out would have been run again by now.
    tokio::time::sleep(LEASE + Duration::from_secs(1)).await;
    let probe = rt.data::<Probe>().unwrap();
    for i in 0..BODIES {
        assert_eq!(probe.attempts(&label(i)), vec![1], "{}", label(i));
    }
    rt.abort();
}

/// (b) While an outcome waits longer than a statement bound to be written (its rows held
/// by another transaction), `health()` is degraded, the store reachable, and the report
/// says how old the oldest unwritten outcome is; once written, ok again.
async fn health_is_degraded_while_an_outcome_waits_too_long(db: TestDb) {
    let rt = started_bodies(&db, &db.url.clone()).await;
    assert_eq!(rt.health().await.status, HealthStatus::Ok);
    let mut locker = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    let locked = sqlx::query("SELECT id FROM async_req FOR UPDATE")
        .fetch_all(&mut locker)
        .await
        .unwrap();
    assert_eq!(locked.len(), BODIES);
    rt.data::<Gate>().unwrap().open();
    let began = Instant::now();
    let degraded = loop {
        let health = rt.health().await;
        if health.status == HealthStatus::Degraded {
            break health;
        }
        assert_eq!(health.status, HealthStatus::Ok, "{health:#?}");
        assert!(
            began.elapsed() < STATEMENT_BOUND * 5,
            "not degraded while outcomes wait: {health:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(degraded.store.reachable, "{degraded:#?}");
    assert!(!degraded.backlog.over_threshold, "{degraded:#?}");
    let outcomes = &degraded.outcomes;
    assert_eq!(outcomes.threshold_ms, STATEMENT_BOUND.as_millis() as u64);
    assert!(outcomes.over_threshold, "{degraded:#?}");
    assert!(
        outcomes
            .oldest_unwritten_ms
            .is_some_and(|age| age > outcomes.threshold_ms),
        "{degraded:#?}"
    );
    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
    outcomes_written_within(&db, STATEMENT_BOUND * 10).await;
    let began = Instant::now();
    loop {
        let health = rt.health().await;
        if health.status == HealthStatus::Ok {
            assert_eq!(health.outcomes.oldest_unwritten_ms, None, "{health:#?}");
            break;
        }
        assert!(
            began.elapsed() < STATEMENT_BOUND * 5,
            "not ok again once the outcomes were written: {health:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rt.abort();
}

/// (c) Bodies ran and every established connection went silent: `shutdown()` returns
/// within its grace plus three statement bounds (writing the outcomes left, handing back
/// the records), and the outcomes are written.
async fn shutdown_returns_in_time_while_connections_are_silent(db: TestDb) {
    let (proxy, url) = Proxy::for_url(&db.url).await;
    let rt = started_bodies(&db, &url).await;
    proxy.black_hole();
    rt.data::<Gate>().unwrap().open();
    let began = Instant::now();
    let grace = rt.settings().shutdown_grace;
    let bound = grace + STATEMENT_BOUND * 3;
    let report = tokio::time::timeout(Duration::from_secs(60), rt.shutdown())
        .await
        .unwrap_or_else(|_| panic!("shutdown did not return within 60 s (bound {bound:?})"));
    let took = began.elapsed();
    eprintln!("shutdown took {took:?}: {report:?}");
    assert!(took < bound, "shutdown took {took:?}, over {bound:?}");
    report.unwrap();
    outcomes_written_within(&db, Duration::from_secs(1)).await;
}

use sqlx::Connection;

/// When a stepped body's step ended and what keeping it gave.
#[derive(Debug, Default)]
struct StepEnds(std::sync::Mutex<Vec<(Instant, Result<i64, String>)>>);

#[async_exec(type = SaveAsync, max_attempts = 5, timeout = "1m")]
async fn stepped_gated(
    label: String,
    gate: Data<Gate>,
    probe: Data<Probe>,
    ends: Data<StepEnds>,
    ctx: Context,
) {
    let kept = ctx
        .step("first", || async {
            probe.record(&label, ctx.attempt());
            let _passed = gate.0.acquire().await;
            Ok::<i64, anyhow::Error>(7)
        })
        .await
        .map_err(|e| e.to_string());
    ends.0.lock().unwrap().push((Instant::now(), kept));
}

/// (d) A step's value is kept by a statement of the execution path, bounded as the
/// others: with the database stalled (nothing answers, new connections neither) while a
/// step finishes, `ctx.step` returns an error within a statement bound or two, and the
/// body can stop before its lease runs out. Seen failing before the fix (the step's
/// statements went unbounded through the operators' store): the step waited for as
/// long as the stall lasted, past its lease, while the record could run elsewhere; the
/// chaos run caught it (a stepped body overlapping its own next attempt).
async fn a_step_is_kept_within_a_bound_or_fails(db: TestDb) {
    let (proxy, url) = Proxy::for_url(&db.url).await;
    let rt = db
        .builder()
        .database_url(&url)
        .lease(LEASE)
        .heartbeat_interval(Duration::from_secs(1))
        .shutdown_grace(Duration::from_secs(1))
        .data(Gate::default())
        .data(StepEnds::default())
        .start()
        .await
        .unwrap();
    stepped_gated("stepped".into()).on(&rt).await.unwrap();
    rt.data::<Probe>()
        .unwrap()
        .wait_runs_within("stepped", 1, Duration::from_secs(20))
        .await;
    proxy.stall();
    let stalled = Instant::now();
    rt.data::<Gate>().unwrap().open();
    let ends = rt.data::<StepEnds>().unwrap();
    let limit = STATEMENT_BOUND * 3;
    while ends.0.lock().unwrap().is_empty() {
        assert!(
            stalled.elapsed() < limit,
            "the step was still being kept {limit:?} into the stall (the lease is {LEASE:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (ended, kept) = ends.0.lock().unwrap()[0].clone();
    eprintln!(
        "the step ended {:?} into the stall: {kept:?}",
        ended - stalled
    );
    assert!(kept.is_err(), "nothing could be kept: {kept:?}");
    proxy.restore();
    rt.abort();
}

/// When each `listening` body (by label) started and was told to stop.
static LISTENING: std::sync::Mutex<Vec<(String, Option<Instant>)>> =
    std::sync::Mutex::new(Vec::new());

fn listening_told(label: &str) -> Option<Option<Instant>> {
    let heard = LISTENING.lock().unwrap();
    heard
        .iter()
        .find(|(l, _)| l == label)
        .map(|(_, told)| *told)
}

/// Runs until told to stop (a cancel, a deadline, a lost lease).
#[async_exec(type = SaveAsync, name = "silent::listening", timeout = "1m")]
async fn listening(label: String, ctx: Context) {
    LISTENING.lock().unwrap().push((label.clone(), None));
    ctx.cancelled().await;
    let mut heard = LISTENING.lock().unwrap();
    if let Some(entry) = heard.iter_mut().find(|(l, _)| *l == label) {
        entry.1 = Some(Instant::now());
    }
}

/// Never runs here: its executor is paused, so that its request waits for its deadline.
#[async_exec(type = SaveAsync, name = "silent::held_back")]
async fn held_back() {}

/// The lease of the runtimes whose statement goes silent in a sweep or loop: 20 s (a
/// bound of 5 s), so that what the test waits for comes from that sweep or loop, not
/// from a lease that ran out.
const LONG_LEASE: Duration = Duration::from_secs(20);

/// A runtime through a fault proxy, with the [`LONG_LEASE`]; and the proxy.
async fn behind_a_proxy_with_a_long_lease(db: &TestDb) -> (Proxy, Runtime) {
    behind_a_proxy(db, LONG_LEASE, Duration::from_secs(1)).await
}

/// A runtime through a fault proxy, with this lease and heartbeat; and the proxy.
async fn behind_a_proxy(db: &TestDb, lease: Duration, heartbeat: Duration) -> (Proxy, Runtime) {
    let (proxy, url) = Proxy::for_url(&db.url).await;
    let rt = db
        .builder()
        .database_url(&url)
        .lease(lease)
        .heartbeat_interval(heartbeat)
        .shutdown_grace(Duration::from_secs(1))
        .data(Gate::default())
        .data(StepEnds::default())
        .start()
        .await
        .unwrap();
    (proxy, rt)
}

/// (e) The stops sweep (cancels and deadlines of running bodies, every second) bounds
/// its statements as the execution path does: one caught by a connection that then goes
/// silent is abandoned, and the next round tells the body. A lease of 20 s here (a bound
/// of 5 s), so that the body is told by the cancel, not by a lease that ran out (a
/// renewal caught by the silence too is abandoned only at the lease's end). Here its statement that ends
/// a waiting request past its deadline waits for a row lock when the connections go
/// silent. Seen failing before (the sweep's statements went unbounded through the
/// operators' store): the sweep waited for an answer that never came, and a cancel of
/// the running body was never heard (the lease, renewed on new connections, did not
/// stop it either).
async fn a_cancel_is_heard_after_a_sweep_statement_went_silent(db: TestDb) {
    let bound = async_exec::statement_bound(LONG_LEASE);
    let label = format!("{:?}", db.kind);
    let (proxy, rt) = behind_a_proxy_with_a_long_lease(&db).await;
    rt.pause_executor("silent::held_back", "test")
        .await
        .unwrap();
    let running = listening(label.clone()).on(&rt).await.unwrap().id.unwrap();
    let started = Instant::now();
    while listening_told(&label).is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the body did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A waiting request whose deadline passes while a transaction here holds its row:
    // the sweep's statement that would make it `dead` waits.
    let deadline = Duration::from_millis(1_500);
    let held = held_back()
        .deadline(deadline)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    let written = Instant::now();
    let mut locker = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let mut lock = locker.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT id FROM async_req WHERE id = {held} FOR UPDATE"
    ))
    .execute(&mut *lock)
    .await
    .unwrap();
    // Past the deadline and into the next round: its statement waits for the lock.
    tokio::time::sleep((deadline + Duration::from_millis(1_300)).saturating_sub(written.elapsed()))
        .await;
    proxy.black_hole();
    lock.rollback().await.unwrap();
    let other = db.builder().run_workers(false).start().await.unwrap();
    other.cancel(running).await.unwrap();
    let asked = Instant::now();
    // Abandoned within a bound, the round after the failed one two seconds later.
    let limit = bound * 2 + Duration::from_secs(3);
    loop {
        if let Some(Some(told)) = listening_told(&label) {
            eprintln!("{label}: told {:?} after the cancel", told - asked);
            break;
        }
        assert!(
            asked.elapsed() < limit,
            "{label}: the body was not told of the cancel within {limit:?}: the stops sweep is stuck on a silent connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    other.shutdown().await.unwrap();
    rt.abort();
}

/// A call made outside any transaction whose write gets no answer (the connections stall
/// past the statement bound) fails with `Error::Unconfirmed`, which says that the record
/// may have been written: a plain "no answer" error let a caller repeat an unkeyed call
/// that had been written (a chaos run on MariaDB: two such calls, one of which ran). Its
/// message names the executor and says what repeating it does.
async fn a_call_whose_write_gets_no_answer_is_unconfirmed(db: TestDb) {
    let lease = Duration::from_secs(2);
    let (proxy, rt) = behind_a_proxy(&db, lease, Duration::from_millis(500)).await;
    proxy.stall();
    let asked = Instant::now();
    let called = held_back().on(&rt).await;
    let waited = asked.elapsed();
    proxy.restore();
    match &called {
        Err(async_exec::Error::Unconfirmed { executor, cause }) => {
            assert_eq!(*executor, "silent::held_back");
            assert!(
                matches!(**cause, async_exec::Error::NoAnswer(_)),
                "{cause:?}"
            );
        }
        other => panic!("expected an unconfirmed call, got {other:?}"),
    }
    let message = called.unwrap_err().to_string();
    assert!(
        message.contains("may have been written") && message.contains(".key("),
        "{message}"
    );
    // Within the bound and a connection's ping, not TCP's patience.
    let bound = async_exec::statement_bound(lease);
    assert!(waited < bound * 2 + Duration::from_secs(1), "{waited:?}");
    rt.abort();
}

/// Issue 30 (M3): a call under a quota outside any transaction was made in a transaction
/// of the runtime's own, and failed with a plain "no answer" when its connections stalled
/// (not `Error::Unconfirmed`, whatever became of its record). It reserves its place in a
/// bounded statement of its own now and writes as any call alone: stalled, it fails
/// within the bound either as `QuotaUnavailable` (the reservation got no answer: nothing
/// of the call was written) or as `Unconfirmed` (the write got none).
async fn a_call_under_a_quota_is_bounded_and_says_what_was_written(db: TestDb) {
    let lease = Duration::from_secs(2);
    let (proxy, url) = Proxy::for_url(&db.url).await;
    let rt = db
        .builder()
        .database_url(&url)
        .lease(lease)
        .heartbeat_interval(Duration::from_millis(500))
        .shutdown_grace(Duration::from_secs(1))
        .max_waiting(Some(100))
        .data(Gate::default())
        .data(StepEnds::default())
        .start()
        .await
        .unwrap();
    // The quota's row is made by a first call.
    held_back().on(&rt).await.unwrap();
    proxy.stall();
    let asked = Instant::now();
    let call = std::future::IntoFuture::into_future(held_back().on(&rt));
    let called = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("a call under a quota still waits after 30 s");
    let waited = asked.elapsed();
    proxy.restore();
    let error = called.expect_err("the connections were stalled");
    let said = error.to_string();
    match &error {
        async_exec::Error::QuotaUnavailable { .. } => {
            assert!(said.contains("nothing of the call was written"), "{said}")
        }
        async_exec::Error::Unconfirmed { .. } => {
            assert!(said.contains("may have been written"), "{said}")
        }
        other => panic!("neither unavailable nor unconfirmed: {other:?}"),
    }
    let bound = async_exec::statement_bound(lease);
    assert!(waited < bound * 2 + Duration::from_secs(1), "{waited:?}");
    rt.abort();
}

/// The bodies of `resumed_later` that ran, by label.
static RESUMED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[async_exec(type = SaveAsync)]
async fn resumed_later(label: String) {
    RESUMED.lock().unwrap().push(label);
}

/// The loop that reads pauses and policies every second also samples the queue depth
/// into `async_depth` (a few seconds after start, then each minute). Caught by a silent
/// connection in that sample, it stopped for good: a resumed executor stayed paused on
/// this instance, and no policy change reached it. Seen failing before the sample's
/// statements were bounded (on PostgreSQL and MariaDB).
async fn pauses_are_read_again_after_a_depth_sample_went_silent(db: TestDb) {
    let bound = async_exec::statement_bound(LONG_LEASE);
    let label = format!("{:?}", db.kind);
    let (proxy, rt) = behind_a_proxy_with_a_long_lease(&db).await;
    let started = Instant::now();
    rt.pause_executor("silent::resumed_later", "test")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    resumed_later(label.clone()).on(&rt).await.unwrap();
    // The first depth sample (5 s after start) waits: a transaction here locks the table.
    let mut locker = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let mut lock = locker.begin().await.unwrap();
    let lock_table = match db.kind {
        common::Kind::Postgres => "LOCK TABLE async_depth IN SHARE MODE",
        _ => "SELECT * FROM async_depth FOR UPDATE",
    };
    sqlx::query(lock_table).execute(&mut *lock).await.unwrap();
    tokio::time::sleep(Duration::from_millis(6_500).saturating_sub(started.elapsed())).await;
    assert!(
        !RESUMED.lock().unwrap().contains(&label),
        "{label}: ran while paused"
    );
    proxy.black_hole();
    lock.rollback().await.unwrap();
    let other = db.builder().run_workers(false).start().await.unwrap();
    assert!(other
        .resume_executor("silent::resumed_later", "test")
        .await
        .unwrap());
    let resumed = Instant::now();
    // The sample abandoned within a bound; pauses read again the second after.
    let limit = bound * 2 + Duration::from_secs(3);
    while !RESUMED.lock().unwrap().contains(&label) {
        assert!(
            resumed.elapsed() < limit,
            "{label}: the resumed executor did not run within {limit:?}: the loop that reads \
             pauses is stuck on a silent connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("{label}: ran {:?} after the resume", resumed.elapsed());
    other.shutdown().await.unwrap();
    rt.abort();
}

network_suite!(
    a_call_whose_write_gets_no_answer_is_unconfirmed,
    a_call_under_a_quota_is_bounded_and_says_what_was_written,
    pauses_are_read_again_after_a_depth_sample_went_silent,
    a_cancel_is_heard_after_a_sweep_statement_went_silent,
    a_step_is_kept_within_a_bound_or_fails,
    outcomes_are_written_when_established_connections_go_silent,
    health_is_degraded_while_an_outcome_waits_too_long,
    shutdown_returns_in_time_while_connections_are_silent,
);

/// PostgreSQL: the server's side of the runtime's connections is bounded too (TCP
/// keepalives every statement bound, three missed end the connection; a TCP user timeout
/// of a lease), so that the server drops a silent client and the locks of a transaction
/// it left open. (The proxy acknowledges every byte, so it cannot show the server doing
/// it: this checks that the sessions are set so.)
#[cfg(all(feature = "postgres", async_exec_test_postgres))]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_sessions_bound_the_servers_side() {
    let db = TestDb::new(common::Kind::Postgres).await;
    let rt = db
        .builder()
        .lease(LEASE)
        .heartbeat_interval(Duration::from_secs(1))
        .data(Gate::default())
        .data(StepEnds::default())
        .start()
        .await
        .unwrap();
    let mut tx = rt.begin::<async_exec::Postgres>().await.unwrap();
    let settings: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, setting FROM pg_settings WHERE name IN ('tcp_keepalives_idle', \
         'tcp_keepalives_interval', 'tcp_keepalives_count', 'tcp_user_timeout') ORDER BY name",
    )
    .fetch_all(tx.conn())
    .await
    .unwrap();
    let expected = [
        ("tcp_keepalives_count", "3"),
        ("tcp_keepalives_idle", "1"),
        ("tcp_keepalives_interval", "1"),
        ("tcp_user_timeout", "4000"),
    ]
    .map(|(n, v)| (n.to_string(), v.to_string()));
    assert_eq!(settings, expected);
    tx.rollback().await.unwrap();
    rt.shutdown().await.unwrap();
}
