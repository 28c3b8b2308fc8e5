//! Issue 18 "Secrets in arguments": a `#[secret]` parameter is sealed (encrypted) in the
//! record with a key of the builder and opened just before the body runs; the console,
//! its API and the command-line tool show it masked. Keys rotate by id; a record whose key
//! is gone goes `dead` naming the key, and runs once the key is back.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use async_exec::Runtime;
use async_exec::{async_exec, batch, Backend, Data, Error, Outcome, Status, TestMode, Tx};
use common::{wait_for, Probe, TestDb};

const CARD: &str = "4242 4242 4242 4242";
const K1: [u8; 32] = [0x5a; 32];
const K2: [u8; 32] = [0x6b; 32];

/// A charge: the card is sealed, the amount is not.
#[async_exec(type = SaveAsync, name = "secrets::charge")]
async fn charge(#[secret] card: String, amount: i64, probe: Data<Probe>) {
    probe.record(&format!("{card}/{amount}"), 1);
}

/// A charge that runs at the call and fails: its retry record is written at once.
#[async_exec(type = SyncSave, name = "secrets::charge_now")]
async fn charge_now(#[secret] card: String, probe: Data<Probe>) -> anyhow::Result<()> {
    probe.record(&format!("now:{card}"), 1);
    anyhow::bail!("the card network is down")
}

/// A charge that runs from memory after the call and fails: its retry record is written
/// then.
#[async_exec(type = AsyncSave, name = "secrets::charge_later")]
async fn charge_later(#[secret] card: String, probe: Data<Probe>) -> anyhow::Result<()> {
    probe.record(&format!("later:{card}"), 1);
    anyhow::bail!("the card network is down")
}

/// A PIN that is a number now; older records may hold something else.
#[async_exec(type = SaveAsync, name = "secrets::unlock")]
async fn unlock(#[secret] pin: u32, probe: Data<Probe>) {
    probe.record(&format!("unlock:{pin}"), 1);
}

/// Requests whose stored arguments hold the card number in plaintext.
async fn plaintext_rows(db: &TestDb) -> i64 {
    db.count("async_req WHERE param_json LIKE '%4242%'").await
}

async fn status_of(rt: &Runtime, id: i64) -> Option<Status> {
    rt.get(id).await.unwrap().map(|r| r.status)
}

async fn a_secret_argument_is_sealed_in_every_record_and_opened_for_the_body<DB: Backend>(
    db: TestDb,
) {
    // Submit-only: the records wait, to be read before they run.
    let rt = db
        .builder()
        .secret_key("k1", K1)
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let alone = charge(CARD.into(), 5).on(&rt).await.unwrap().id.unwrap();
    let mut tx: Tx<DB> = rt.begin().await.unwrap();
    let within = charge(CARD.into(), 6)
        .on(&rt)
        .within(&mut tx)
        .await
        .unwrap()
        .id
        .unwrap();
    tx.commit().await.unwrap();
    let batched = batch([charge(CARD.into(), 7), charge(CARD.into(), 8)])
        .on(&rt)
        .await
        .unwrap();
    // A call that joins a `Runtime::transaction` scope.
    rt.transaction(|_tx: &mut Tx<DB>| {
        Box::pin(async move {
            charge(CARD.into(), 10).await?;
            Ok::<_, Error>(())
        })
    })
    .await
    .unwrap();
    // SyncSave ran the body (with the plaintext) and wrote its failure record.
    let deferred = charge_now(CARD.into()).on(&rt).await.unwrap();
    assert!(
        matches!(deferred.outcome, Outcome::Deferred { .. }),
        "{deferred:?}"
    );
    let probe = rt.data::<Probe>().unwrap();
    assert_eq!(
        probe.runs(&format!("now:{CARD}")),
        1,
        "SyncSave's body got the plaintext"
    );

    assert_eq!(plaintext_rows(&db).await, 0, "no record holds the card");
    assert_eq!(
        db.count("async_req WHERE param_json LIKE '%\"$sealed\":\"k1.%'")
            .await,
        6
    );
    let stored = rt.get(alone).await.unwrap().unwrap();
    assert!(!stored.param_json.contains("4242"), "{}", stored.param_json);
    assert!(
        stored.param_json.contains(r#""amount":5"#),
        "{}",
        stored.param_json
    );
    rt.shutdown().await.unwrap();

    // An instance with the key runs them: the bodies get the plaintext.
    let rt = db.builder().secret_key("k1", K1).start().await.unwrap();
    let ids = [
        alone,
        within,
        batched[0].id.unwrap(),
        batched[1].id.unwrap(),
    ];
    for id in ids {
        wait_gone(&rt, id).await;
    }
    let probe = rt.data::<Probe>().unwrap();
    probe.wait_runs(&format!("{CARD}/10"), 1).await;
    for amount in [5, 6, 7, 8, 10] {
        assert_eq!(
            probe.runs(&format!("{CARD}/{amount}")),
            1,
            "amount {amount}"
        );
    }
    rt.shutdown().await.unwrap();
}

/// Waits until request `id` has status `status` (`None`: deleted, it succeeded).
async fn wait_status(rt: &Runtime, id: i64, status: Option<Status>) {
    wait_for(move || async move { status_of(rt, id).await == status }).await;
}

async fn wait_gone(rt: &Runtime, id: i64) {
    wait_status(rt, id, None).await;
}

/// Submits a charge of `amount` through a submit-only instance sealing with `id`/`key`.
async fn sealed_with(db: &TestDb, id: &str, key: [u8; 32], amount: i64) -> i64 {
    let rt = db
        .builder()
        .secret_key(id, key)
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let request = charge(CARD.into(), amount)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    rt.shutdown().await.unwrap();
    request
}

async fn keys_rotate_by_id<DB: Backend>(db: TestDb) {
    let old = sealed_with(&db, "k1", K1, 1).await;
    // The new key seals; the old one still opens.
    let rt = db
        .builder()
        .secret_key("k1", K1)
        .secret_key_base64("k2", &base64_of(&K2))
        .sealing_key("k2")
        .run_workers(false)
        .start()
        .await
        .unwrap();
    let new = charge(CARD.into(), 2).on(&rt).await.unwrap().id.unwrap();
    let stored = rt.get(new).await.unwrap().unwrap().param_json;
    assert!(stored.contains(r#""$sealed":"k2."#), "{stored}");
    let stored = rt.get(old).await.unwrap().unwrap().param_json;
    assert!(stored.contains(r#""$sealed":"k1."#), "{stored}");
    rt.start_workers().unwrap();
    wait_gone(&rt, old).await;
    wait_gone(&rt, new).await;
    let probe = rt.data::<Probe>().unwrap();
    assert_eq!(probe.runs(&format!("{CARD}/1")), 1);
    assert_eq!(probe.runs(&format!("{CARD}/2")), 1);
    rt.shutdown().await.unwrap();
}

async fn a_record_whose_key_is_gone_goes_dead_naming_it_and_runs_once_it_is_back<DB: Backend>(
    db: TestDb,
) {
    let id = sealed_with(&db, "k1", K1, 3).await;
    let rt = db.builder().secret_key("k2", K2).start().await.unwrap();
    wait_status(&rt, id, Some(Status::Dead)).await;
    let dead = rt.get(id).await.unwrap().unwrap();
    let error = dead.last_error.unwrap_or_default();
    assert!(error.contains("sealed with key `k1`"), "{error}");
    assert!(error.contains("Builder::secret_key"), "{error}");
    assert!(!error.contains("4242"), "{error}");
    assert_eq!(dead.exec_count, 1);
    let probe = rt.data::<Probe>().unwrap();
    assert_eq!(probe.runs(&format!("{CARD}/3")), 0, "the body never ran");
    // A key of the same id that is not the one that sealed it: dead again, not a panic.
    rt.shutdown().await.unwrap();
    let rt = db.builder().secret_key("k1", K2).start().await.unwrap();
    rt.retry_now(id).await.unwrap();
    rt.retrier().run_once().await.unwrap(); // the retry sweep is parked in tests
    let handle = &rt;
    wait_for(move || async move {
        handle.get(id).await.unwrap().is_some_and(|r| {
            r.status == Status::Dead
                && r.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("does not open with key `k1`"))
        })
    })
    .await;
    rt.shutdown().await.unwrap();
    // Nothing was lost: with the key back, a retry runs it.
    let rt = db.builder().secret_key("k1", K1).start().await.unwrap();
    rt.retry_now(id).await.unwrap();
    rt.retrier().run_once().await.unwrap(); // the retry sweep is parked in tests
    wait_gone(&rt, id).await;
    assert_eq!(rt.data::<Probe>().unwrap().runs(&format!("{CARD}/3")), 1);
    rt.shutdown().await.unwrap();
}

async fn missing_or_bad_keys_are_clear_errors_at_start<DB: Backend>(db: TestDb) {
    let expect_config = |result: Result<Runtime, Error>, needles: &[&str]| match result {
        Err(Error::Config { setting, reason }) => {
            assert_eq!(setting, "secret_key");
            for needle in needles {
                assert!(reason.contains(needle), "{needle} in {reason}");
            }
        }
        Err(other) => panic!("expected Error::Config, got {other}"),
        Ok(_) => panic!("started without usable keys"),
    };
    expect_config(
        db.builder().start().await,
        &[
            "`secrets::charge`",
            "`secrets::charge_now`",
            "Builder::secret_key",
        ],
    );
    expect_config(
        db.builder()
            .secret_key_base64("k1", "not base64!")
            .start()
            .await,
        &["key `k1` is not the base64 of 32 bytes"],
    );
    expect_config(
        db.builder()
            .secret_key("k1", K1)
            .sealing_key("k9")
            .start()
            .await,
        &["sealing_key(\"k9\") names no key"],
    );
    // Keys never show in Debug output, only their ids.
    let debug = format!(
        "{:?}",
        db.builder().secret_key("k1", K1).secret_key("k2", K2)
    );
    assert!(debug.contains(r#"ids: ["k1", "k2"]"#), "{debug}");
    assert!(
        !debug.contains("90, 90") && !debug.contains("107, 107"),
        "{debug}"
    ); // 0x5a, 0x6b
    assert!(
        !debug.contains("5a5a") && !debug.contains("WlpaWlpa"),
        "{debug}"
    );
}

async fn the_retry_record_of_a_failed_in_memory_call_is_sealed<DB: Backend>(db: TestDb) {
    let rt = db.builder().secret_key("k1", K1).start().await.unwrap();
    let receipt = charge_later(CARD.into()).on(&rt).await.unwrap();
    assert_eq!(receipt.outcome, Outcome::InMemory);
    let probe = rt.data::<Probe>().unwrap();
    probe.wait_runs(&format!("later:{CARD}"), 1).await;
    let db = &db;
    wait_for(move || async move {
        db.count("async_req WHERE executor = 'secrets::charge_later'")
            .await
            == 1
    })
    .await;
    assert_eq!(
        plaintext_rows(db).await,
        0,
        "the retry record holds the card"
    );
    assert_eq!(
        db.count("async_req WHERE param_json LIKE '%\"$sealed\":\"k1.%'")
            .await,
        1
    );
    rt.shutdown().await.unwrap();
}

async fn a_decode_error_does_not_repeat_a_secret_value<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .secret_key("k1", K1)
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    // A record written before `pin` was marked (and typed `u32`): its value is plaintext
    // and no longer decodes. The error (stored, logged, shown) must not repeat it.
    let id = db
        .insert_raw(
            "secrets::unlock",
            "0000000000000000",
            r#"{"pin":"1234-old-secret"}"#,
        )
        .await;
    rt.drain().await.unwrap();
    assert_eq!(status_of(&rt, id).await, Some(Status::Dead));
    let error = rt
        .get(id)
        .await
        .unwrap()
        .unwrap()
        .last_error
        .unwrap_or_default();
    assert!(error.contains("`secrets::unlock`"), "{error}");
    assert!(error.contains("line 1 column"), "{error}");
    assert!(!error.contains("1234"), "{error}");
    rt.shutdown().await.unwrap();
}

/// The standard base64 of `bytes` (padded), as `openssl rand -base64 32` prints a key.
fn base64_of(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
        }
    }
    while out.len() % 4 != 0 {
        out.push('=');
    }
    out
}

backend_suite!(
    a_secret_argument_is_sealed_in_every_record_and_opened_for_the_body,
    keys_rotate_by_id,
    a_record_whose_key_is_gone_goes_dead_naming_it_and_runs_once_it_is_back,
    missing_or_bad_keys_are_clear_errors_at_start,
    a_decode_error_does_not_repeat_a_secret_value,
    the_retry_record_of_a_failed_in_memory_call_is_sealed,
);

/// The console, its JSON API and the command-line tool show a sealed argument masked.
#[cfg(feature = "console")]
mod shown {
    use super::*;
    use common::console::{get, login, mounted, Auth};

    async fn the_console_the_api_and_the_cli_show_it_masked<DB: Backend>(db: TestDb) {
        let rt = db
            .builder()
            .secret_key("k1", K1)
            .run_workers(false)
            .start()
            .await
            .unwrap();
        let id = charge(CARD.into(), 9).on(&rt).await.unwrap().id.unwrap();
        let app = mounted(&rt);
        let (cookie, _) = login(&app, "victor", "viewer pass").await;
        let auth = Auth::Cookie(&cookie);
        let api = get(&app, &format!("/api/requests/{id}"), auth).await;
        assert!(!api.body.contains("4242"), "{}", api.body);
        let detail = api.json();
        assert_eq!(detail["arguments"]["card"], "••• (sealed, key k1)");
        assert_eq!(detail["arguments"]["amount"], 9);
        let page = get(&app, &format!("/requests/{id}"), Auth::Cookie(&cookie)).await;
        assert!(page.body.contains("••• (sealed, key k1)"), "{}", page.body);
        assert!(!page.body.contains("4242"));
        #[cfg(feature = "cli")]
        {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_async-exec"))
                .args([
                    "--url",
                    &db.url,
                    "--application",
                    "tests",
                    "show",
                    &id.to_string(),
                ])
                .env_remove("ASYNC_EXEC_DATABASE_URL")
                .output()
                .await
                .expect("run async-exec");
            let shown = String::from_utf8(output.stdout).unwrap();
            assert!(output.status.success(), "{shown}");
            assert!(
                shown.contains("\"card\": \"••• (sealed, key k1)\""),
                "{shown}"
            );
            assert!(!shown.contains("4242"), "{shown}");
        }
        rt.shutdown().await.unwrap();
    }

    backend_suite!(the_console_the_api_and_the_cli_show_it_masked);
}
