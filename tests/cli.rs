//! Issue 9: the `async-exec` command-line tool, run as a process (the binary that
//! `cargo test --features cli` builds) against each backend: every subcommand in human
//! and JSON output, filters with SQL metacharacters and odd Unicode, purge counts, a
//! wrong URL's message, exit codes.
#![cfg(feature = "cli")]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::process::Output;

use async_exec::{async_exec, Backend, Final};
use common::TestDb;
use serde_json::Value;

/// The binary under test, built by Cargo for this test.
const BINARY: &str = env!("CARGO_BIN_EXE_async-exec");

/// A last error with SQL metacharacters and odd Unicode: quotes, a comment, LIKE
/// wildcards, a backslash, a right-to-left override, a right-to-left mark, a combining
/// accent, an emoji.
const ODD: &str = "boom ' OR 1=1 -- 50%_off \\ \u{202e}txet\u{200f} e\u{301} 🎉";

/// An idempotency key that looks like an injection.
const ODD_KEY: &str = "ключ' OR '1'='1 %_\\ 🎉";

#[async_exec(type = SaveAsync, name = "cli::ok", remark = "50% off_sale 'quoted' \\ 🎉")]
async fn ok_job(n: i64) {
    let _ = n;
}

#[async_exec(type = SaveAsync, name = "cli::dead", max_attempts = 1)]
async fn dead_job(message: String) -> Result<(), Final> {
    Err(Final::new(message))
}

#[async_exec(type = SaveAsync, name = "cli::flaky", max_attempts = 3)]
async fn flaky_job(message: String) -> anyhow::Result<()> {
    anyhow::bail!(message)
}

/// Called at New Year in Auckland: once a year, so never during a test run but for the
/// schedule `schedules` lists.
#[async_exec(
    type = SaveAsync,
    name = "cli::new_year",
    cron = "0 0 0 1 1 *",
    time_zone = "Pacific/Auckland"
)]
async fn new_year() {}

/// What one run of the tool did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", self.stdout))
    }

    #[track_caller]
    fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

async fn run_tool(args: &[&str]) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = tokio::process::Command::new(BINARY)
        .args(args)
        .env_remove("ASYNC_EXEC_DATABASE_URL")
        .output()
        .await
        .expect("run async-exec");
    Run {
        code: status.code().expect("exited, not killed"),
        stdout: String::from_utf8(stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(stderr).expect("UTF-8 stderr"),
    }
}

/// Runs the tool on the test's database, for the tests' application.
async fn tool(db: &TestDb, args: &[&str]) -> Run {
    let mut all = vec!["--url", &db.url, "--application", "tests"];
    all.extend_from_slice(args);
    run_tool(&all).await
}

/// The ids of the requests a `--json list` printed.
fn ids(list: &Value) -> Vec<i64> {
    list["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// Two successes (kept), a dead one and a failed one with [`ODD`] errors, two waiting
/// ones (one with [`ODD_KEY`]); the runtime that made them is shut down.
struct Fixture {
    success: Vec<i64>,
    dead: i64,
    failed: i64,
    waiting: Vec<i64>,
}

async fn fixture(db: &TestDb) -> Fixture {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let mut success = Vec::new();
    for n in 0..2 {
        success.push(ok_job(n).on(&rt).await.unwrap().id.unwrap());
    }
    let dead = dead_job(ODD.into()).on(&rt).await.unwrap().id.unwrap();
    let failed = flaky_job(format!("flaky {ODD}"))
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    rt.wait_idle().await;
    rt.shutdown().await.unwrap();
    let submit_only = db.builder().run_workers(false).start().await.unwrap();
    let waiting = vec![
        ok_job(10)
            .key(ODD_KEY)
            .on(&submit_only)
            .await
            .unwrap()
            .id
            .unwrap(),
        ok_job(11).on(&submit_only).await.unwrap().id.unwrap(),
    ];
    submit_only.shutdown().await.unwrap();
    Fixture {
        success,
        dead,
        failed,
        waiting,
    }
}

async fn status_of(db: &TestDb, id: i64) -> Option<String> {
    let shown = tool(db, &["--json", "list", "--id", &id.to_string()])
        .await
        .ok();
    shown.json()["requests"][0]["status"]
        .as_str()
        .map(str::to_string)
}

async fn migrate_stats_list_show<DB: Backend>(db: TestDb) {
    let migrated = tool(&db, &["migrate"]).await.ok();
    assert!(
        migrated.stdout.contains("up to date"),
        "{}",
        migrated.stdout
    );
    assert_eq!(
        tool(&db, &["--json", "migrate"]).await.ok().json()["migrated"],
        true
    );
    let empty = tool(&db, &["--json", "stats"]).await.ok().json();
    assert_eq!(empty["total"], 0);
    assert_eq!(empty["counts"]["dead"], 0, "zeros are listed: {empty}");
    let f = fixture(&db).await;

    let stats = tool(&db, &["--json", "stats"]).await.ok().json();
    let counts = &stats["counts"];
    assert_eq!(
        (
            &counts["success"],
            &counts["dead"],
            &counts["failed"],
            &counts["init"]
        ),
        (&2.into(), &1.into(), &1.into(), &2.into()),
        "{stats}"
    );
    assert_eq!(
        (&counts["running"], &counts["cancelled"]),
        (&0.into(), &0.into())
    );
    assert_eq!(stats["total"], 6);
    let human = tool(&db, &["stats"]).await.ok().stdout;
    let line = |status: &str| {
        human
            .lines()
            .find(|l| l.split_whitespace().next() == Some(status))
            .map(|l| l.split_whitespace().last().unwrap().to_string())
    };
    assert_eq!(line("dead").as_deref(), Some("1"), "{human}");
    assert_eq!(line("cancelled").as_deref(), Some("0"), "{human}");
    assert_eq!(line("total").as_deref(), Some("6"), "{human}");

    // list, newest first, all of them; the JSON arguments are values, not strings.
    let listed = tool(&db, &["--json", "list"]).await.ok().json();
    let mut all: Vec<i64> = f.success.iter().chain(&f.waiting).copied().collect();
    all.extend([f.dead, f.failed]);
    all.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids(&listed), all);
    assert_eq!(listed["next"], Value::Null);
    let dead = tool(&db, &["--json", "list", "--status", "dead"])
        .await
        .ok()
        .json();
    assert_eq!(ids(&dead), vec![f.dead]);
    assert_eq!(dead["requests"][0]["param_json"]["message"], ODD);
    assert_eq!(dead["requests"][0]["last_error"], ODD);
    // Human: a table; the stored text cannot reach the terminal as control characters.
    let table = tool(&db, &["list"]).await.ok().stdout;
    assert!(table.starts_with("ID "), "{table}");
    assert!(
        table.contains("cli::dead") && table.contains("dead"),
        "{table}"
    );
    assert!(
        table.contains("\\u{202e}"),
        "the RTL override is shown escaped: {table}"
    );
    assert!(!table.contains('\u{202e}'), "{table}");
    assert_eq!(table.lines().count(), 7, "a header and six rows: {table}");

    // show: arguments as pretty JSON, every attempt.
    let shown = tool(&db, &["show", &f.dead.to_string()]).await.ok().stdout;
    assert!(shown.contains("status      dead"), "{shown}");
    assert!(
        shown.contains("arguments\n  {\n    \"message\": "),
        "{shown}"
    );
    assert!(shown.contains("attempts\nRUN  ATTEMPT"), "{shown}");
    assert!(shown.contains("final"), "{shown}");
    assert!(!shown.contains('\u{202e}'), "{shown}");
    let shown = tool(&db, &["--json", "show", &f.failed.to_string()])
        .await
        .ok()
        .json();
    assert_eq!(shown["request"]["id"], f.failed);
    assert_eq!(
        shown["request"]["param_json"]["message"],
        format!("flaky {ODD}")
    );
    let attempts = shown["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{shown}");
    assert_eq!(attempts[0]["outcome"], "error");
    assert_eq!(attempts[0]["attempt"], 1);
    let missing = tool(&db, &["show", "999999"]).await;
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("no request with id 999999"),
        "{}",
        missing.stderr
    );
    assert!(missing.stdout.is_empty());
    // The tool ran nothing and left no trace as an instance: every record is as the
    // fixture left it, and it removed its announcement when it stopped.
    assert_eq!(db.count("async_instance").await, 0);
    assert_eq!(db.count("async_req WHERE status = 'running'").await, 0);
    assert_eq!(
        db.count("async_log").await,
        2,
        "one attempt each of dead and failed"
    );
    // Another application sees none of them.
    let other = run_tool(&["--url", &db.url, "--application", "other", "--json", "list"])
        .await
        .ok();
    assert_eq!(ids(&other.json()), Vec::<i64>::new());
}

async fn retry_cancel_delete<DB: Backend>(db: TestDb) {
    let f = fixture(&db).await;
    let (dead, success) = (f.dead.to_string(), f.success[0].to_string());

    // retry: a dead request runs again with fresh attempts (it is queued: `failed`, due).
    let retried = tool(&db, &["retry", &dead]).await.ok();
    assert!(
        retried.stdout.contains("queued to run again"),
        "{}",
        retried.stdout
    );
    assert_eq!(status_of(&db, f.dead).await.as_deref(), Some("failed"));
    // A success needs --replay.
    let refused = tool(&db, &["retry", &success]).await;
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(refused.stdout.contains("--replay"), "{}", refused.stdout);
    assert!(refused.stderr.contains("1 of 1"), "{}", refused.stderr);
    assert_eq!(
        status_of(&db, f.success[0]).await.as_deref(),
        Some("success")
    );
    tool(&db, &["retry", "--replay", &success]).await.ok();
    assert_eq!(
        status_of(&db, f.success[0]).await.as_deref(),
        Some("failed")
    );
    // Issue 30: --reset-steps (with --replay) forgets the request's durable steps.
    let stepped = f.success[1];
    db.exec(&format!(
        "INSERT INTO async_step (application_name, req_id, position, name, value_json, \
         attempt, create_time) VALUES ('tests', {stepped}, 0, 'charge', '\"ch_1\"', 1, 0)"
    ))
    .await;
    let alone = tool(&db, &["retry", "--reset-steps", &stepped.to_string()]).await;
    assert_eq!(
        alone.code, 2,
        "--reset-steps needs --replay: {}",
        alone.stderr
    );
    let reset = tool(
        &db,
        &["retry", "--replay", "--reset-steps", &stepped.to_string()],
    )
    .await
    .ok();
    assert!(reset.stdout.contains("steps forgotten"), "{}", reset.stdout);
    assert_eq!(status_of(&db, stepped).await.as_deref(), Some("failed"));
    assert_eq!(
        db.count(&format!("async_step WHERE req_id = {stepped}"))
            .await,
        0
    );

    // cancel: waiting requests; a cancelled one cannot be cancelled again.
    let waiting: Vec<String> = f.waiting.iter().map(i64::to_string).collect();
    let cancelled = tool(&db, &["--json", "cancel", &waiting[0], &waiting[1]])
        .await
        .ok();
    assert_eq!(
        cancelled.json()["results"],
        serde_json::json!([{ "id": f.waiting[0], "ok": true }, { "id": f.waiting[1], "ok": true }])
    );
    assert_eq!(
        status_of(&db, f.waiting[0]).await.as_deref(),
        Some("cancelled")
    );
    let again = tool(&db, &["cancel", &waiting[0]]).await;
    assert_eq!(again.code, 1);
    assert!(again.stdout.contains("is `cancelled`"), "{}", again.stdout);

    // delete: one that exists and one that does not, in one run: both reported, exit 1.
    let deleted = tool(&db, &["--json", "delete", &waiting[1], "999999"]).await;
    assert_eq!(deleted.code, 1, "{}", deleted.stderr);
    let results = deleted.json()["results"].clone();
    assert_eq!(
        results[0],
        serde_json::json!({ "id": f.waiting[1], "ok": true })
    );
    assert_eq!(results[1]["ok"], false);
    assert!(results[1]["error"]
        .as_str()
        .unwrap()
        .contains("no request with id 999999"));
    assert_eq!(status_of(&db, f.waiting[1]).await, None);
    assert_eq!(
        db.count(&format!("async_req WHERE id = {}", f.waiting[1]))
            .await,
        0
    );
    assert_eq!(db.count("async_req").await, 5);
}

async fn filters_with_metacharacters_and_odd_unicode<DB: Backend>(db: TestDb) {
    let f = fixture(&db).await;
    let list = |args: Vec<String>| {
        let db = &db;
        async move {
            let mut all = vec!["--json".to_string(), "list".to_string()];
            all.extend(args);
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            ids(&tool(db, &refs).await.ok().json())
        }
    };
    let arg = |a: &str, b: &str| vec![a.to_string(), b.to_string()];
    let both = {
        let mut v = vec![f.failed, f.dead];
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    };
    // Every piece of the odd text finds exactly the two errors that hold it, and no
    // piece is a wildcard or ends the string.
    for needle in [
        "' OR 1=1 --",
        "%",
        "_",
        "\\",
        "50%_off",
        "\u{202e}",
        "\u{200f}",
        "e\u{301}",
        "🎉",
        ODD,
    ] {
        assert_eq!(
            list(arg("--error", needle)).await,
            both,
            "--error {needle:?}"
        );
    }
    assert_eq!(list(arg("--error", "flaky")).await, vec![f.failed]);
    assert_eq!(
        list(arg("--error", "BOOM")).await,
        Vec::<i64>::new(),
        "case counts"
    );
    assert_eq!(list(arg("--error", "%%")).await, Vec::<i64>::new());
    assert_eq!(list(arg("--error", "' OR '1'='1")).await, Vec::<i64>::new());
    // Keys compare exactly.
    assert_eq!(list(arg("--key", ODD_KEY)).await, vec![f.waiting[0]]);
    for key in ["%", "_", "ключ%", "' OR '1'='1"] {
        assert_eq!(
            list(arg("--key", key)).await,
            Vec::<i64>::new(),
            "--key {key:?}"
        );
    }
    // Remarks hold a substring.
    let oks = {
        let mut v: Vec<i64> = f.success.iter().chain(&f.waiting).copied().collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    };
    assert_eq!(
        list(arg("--remark", "50% off_sale 'quoted' \\ 🎉")).await,
        oks
    );
    assert_eq!(list(arg("--remark", "%")).await, oks);
    assert_eq!(list(arg("--remark", "100%")).await, Vec::<i64>::new());
    // Executors compare exactly; an injection finds nothing and breaks nothing.
    assert_eq!(list(arg("--executor", "cli::dead")).await, vec![f.dead]);
    assert_eq!(
        list(arg("--executor", "x' OR '1'='1")).await,
        Vec::<i64>::new()
    );
    assert_eq!(list(arg("--executor", "cli::%")).await, Vec::<i64>::new());
    // Filters combine.
    let mut dead_with_odd = arg("--status", "dead");
    dead_with_odd.extend(arg("--error", "🎉"));
    assert_eq!(list(dead_with_odd).await, vec![f.dead]);
    assert_eq!(list(arg("--id", &f.dead.to_string())).await, vec![f.dead]);
    // Time ranges.
    assert_eq!(list(arg("--since", "1h")).await.len(), 6);
    assert_eq!(list(arg("--until", "1h")).await, Vec::<i64>::new());
    assert_eq!(list(arg("--until", "1970-01-02")).await, Vec::<i64>::new());
    assert_eq!(list(arg("--since", "2000-01-01T00:00:00Z")).await.len(), 6);
    assert_eq!(list(arg("--since", "9999-01-01")).await, Vec::<i64>::new());
    // Keyset paging, newest first: pages of 4 then 2, then nothing.
    let mut everything = list(vec![]).await;
    let first = tool(&db, &["--json", "list", "--limit", "4"])
        .await
        .ok()
        .json();
    assert_eq!(ids(&first), everything[..4]);
    let after = first["next"].as_str().expect("a next page").to_string();
    assert_eq!(
        after,
        everything[3].to_string(),
        "the cursor of the last request"
    );
    let second = tool(&db, &["--json", "list", "--limit", "4", "--after", &after])
        .await
        .ok()
        .json();
    assert_eq!(ids(&second), everything[4..]);
    assert_eq!(second["next"], Value::Null);
    let human = tool(&db, &["list", "--limit", "4"]).await.ok().stdout;
    assert!(
        human.ends_with(&format!("next page: --after {after}\n")),
        "{human}"
    );
    // Oldest first with --oldest, and its next page.
    everything.reverse();
    let up = tool(&db, &["--json", "list", "--limit", "3", "--oldest"])
        .await
        .ok()
        .json();
    assert_eq!(ids(&up), everything[..3]);
    let after = up["next"].as_str().unwrap().to_string();
    let human = tool(&db, &["list", "--limit", "3", "--oldest"])
        .await
        .ok()
        .stdout;
    assert!(
        human.ends_with(&format!("next page: --oldest --after {after}\n")),
        "{human}"
    );
    let rest = list(vec!["--oldest".into(), "--after".into(), after]).await;
    assert_eq!(rest, everything[3..]);
    // A text search looks at --search-window requests a page, and says where it stopped.
    let newest: Vec<i64> = everything.iter().rev().copied().collect();
    let searched = tool(
        &db,
        &["--json", "list", "--error", "flaky", "--search-window", "1"],
    )
    .await
    .ok()
    .json();
    assert_eq!(
        ids(&searched),
        Vec::<i64>::new(),
        "the newest is not the flaky one"
    );
    assert_eq!(searched["searched"], 1, "{searched}");
    let after = searched["next"].as_str().unwrap().to_string();
    assert_eq!(after, newest[0].to_string(), "the request looked at");
    let human = tool(&db, &["list", "--error", "flaky", "--search-window", "1"])
        .await
        .ok()
        .stdout;
    assert!(
        human.ends_with(&format!(
            "searched 1 requests without filling the page\nnext page: --after {after}\n"
        )),
        "{human}"
    );
    let mut found = Vec::new();
    let mut after = None::<String>;
    loop {
        let mut args = vec!["--json", "list", "--error", "flaky", "--search-window", "2"];
        if let Some(after) = &after {
            args.extend(["--after", after.as_str()]);
        }
        let page = tool(&db, &args).await.ok().json();
        found.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(found, vec![f.failed]);
}

async fn purge_counts<DB: Backend>(db: TestDb) {
    let f = fixture(&db).await;
    tool(&db, &["cancel", &f.waiting[1].to_string()]).await.ok();
    // Log rows whose request is gone: two that will be old, one that will be recent.
    let day = 86_400_000_i64;
    let now = common::now_ms();
    for (req, finished) in [
        (900_001, now - day),
        (900_002, now - day),
        (900_003, now + 8 * day),
    ] {
        db.exec(&format!(
            "INSERT INTO async_log (req_id, attempt, worker, started, finished, outcome, error) \
             VALUES ({req}, 1, 'tests@gone:1:00', {finished}, {finished}, 'success', NULL)"
        ))
        .await;
    }
    // Everything is fresh: nothing is old enough.
    let nothing = tool(&db, &["--json", "purge", "--older-than", "7d"])
        .await
        .ok()
        .json();
    assert_eq!(
        (&nothing["requests"], &nothing["attempt_logs"]),
        (&0.into(), &0.into()),
        "{nothing}"
    );
    // Eight days later (records and their logs).
    db.exec(&format!(
        "UPDATE async_req SET update_time = update_time - {}",
        8 * day
    ))
    .await;
    db.exec(&format!(
        "UPDATE async_log SET finished = finished - {}",
        8 * day
    ))
    .await;
    // Finished ones go (2 success, 1 cancelled), 2 per batch; dead and waiting ones stay;
    // the two old orphaned logs go.
    let purged = tool(
        &db,
        &["--json", "purge", "--older-than", "7d", "--batch", "2"],
    )
    .await
    .ok()
    .json();
    assert_eq!(purged["requests"], 3, "{purged}");
    assert_eq!(purged["attempt_logs"], 2, "{purged}");
    assert!(purged["batches"].as_u64().unwrap() >= 3, "{purged}");
    let stats = tool(&db, &["--json", "stats"]).await.ok().json();
    assert_eq!(stats["counts"]["dead"], 1, "{stats}");
    assert_eq!(stats["counts"]["failed"], 1, "{stats}");
    assert_eq!(stats["counts"]["init"], 1, "{stats}");
    assert_eq!(stats["total"], 3, "{stats}");
    // --dead: the dead one and its attempt log, in human output.
    let human = tool(&db, &["purge", "--dead", "--older-than", "7d"])
        .await
        .ok()
        .stdout;
    assert!(
        human.starts_with("purged 1 request (success, cancelled, dead) and 1 attempt log "),
        "{human}"
    );
    assert_eq!(
        db.count(&format!("async_log WHERE req_id = {}", f.dead))
            .await,
        0
    );
    // Left: the failed request and its log, the waiting one, the recent orphaned log.
    assert_eq!(db.count("async_req").await, 2);
    assert_eq!(db.count("async_log").await, 2);
    assert_eq!(
        db.count(&format!("async_log WHERE req_id = {}", f.failed))
            .await,
        1
    );
    // A longer age purges nothing more.
    let none = tool(&db, &["--json", "purge", "--dead", "--older-than", "30d"])
        .await
        .ok()
        .json();
    assert_eq!(none["requests"], 0);
}

/// `schedules` lists what the live instances that run workers announce (the CLI links no
/// executor of theirs), with the next ticks; a submit-only instance is not counted.
async fn schedules_of_live_instances<DB: Backend>(db: TestDb) {
    let submitter = db.builder().run_workers(false).start().await.unwrap();
    let none = tool(&db, &["--json", "schedules"]).await.ok().json();
    assert_eq!(
        none["schedules"],
        serde_json::json!([]),
        "a submit-only instance calls no schedule"
    );
    let worker = db.builder().start().await.unwrap();
    let listed = tool(&db, &["--json", "schedules", "--next", "2"])
        .await
        .ok()
        .json();
    let new_year = listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["executor"] == "cli::new_year")
        .unwrap_or_else(|| panic!("listed: {listed}"))
        .clone();
    assert_eq!(new_year["describe"], "cron 0 0 0 1 1 * (Pacific/Auckland)");
    assert_eq!(
        new_year["instances"].as_array().unwrap().len(),
        1,
        "{new_year}"
    );
    let next: Vec<i64> = serde_json::from_value(new_year["next"].clone()).unwrap();
    assert_eq!(next.len(), 2);
    // Midnight on 1 January in Auckland is 11:00 UTC on 31 December (NZDT, +13).
    assert_eq!(next[0].rem_euclid(86_400_000), 11 * 3_600_000, "{next:?}");
    assert!(
        (365..=366).contains(&((next[1] - next[0]) / 86_400_000)),
        "{next:?}"
    );
    let human = tool(&db, &["schedules"]).await.ok();
    assert!(
        human.stdout.contains("cli::new_year") && human.stdout.contains("Pacific/Auckland"),
        "{}",
        human.stdout
    );
    let bad = tool(&db, &["schedules", "--next", "0"]).await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    worker.shutdown().await.unwrap();
    submitter.shutdown().await.unwrap();
}

backend_suite!(
    schedules_of_live_instances,
    migrate_stats_list_show,
    retry_cancel_delete,
    filters_with_metacharacters_and_odd_unicode,
    purge_counts,
);

/// A TCP port on 127.0.0.1 that nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    port
}

#[tokio::test]
async fn a_wrong_url_says_where_and_why_without_the_password() {
    for scheme in ["postgres", "mysql"] {
        let port = closed_port();
        let url = format!("{scheme}://ops:s3cr3t-pw@127.0.0.1:{port}/shop");
        let run = run_tool(&["--url", &url, "stats"]).await;
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(run.stdout.is_empty());
        assert!(
            run.stderr.contains(&format!("ops@127.0.0.1:{port}/shop")),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains("onnection refused"), "{}", run.stderr);
        assert!(
            run.stderr.contains("check that the server runs"),
            "{}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("s3cr3t"),
            "the password shows: {}",
            run.stderr
        );
    }
    // An unknown scheme, with its password hidden.
    let run = run_tool(&["--url", "oracle://u:s3cr3t-pw@h/db", "stats"]).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("unsupported database URL"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("s3cr3t"), "{}", run.stderr);
    // A SQLite file that is not there is not created by a typo.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let url = format!("sqlite:{}", path.display());
    let run = run_tool(&["--url", &url, "list"]).await;
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("async-exec migrate"), "{}", run.stderr);
    assert!(!path.exists());
    // A database without the tables says to migrate.
    std::fs::File::create(&path).unwrap();
    let run = run_tool(&["--url", &url, "list"]).await;
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("tables are missing"), "{}", run.stderr);
    run_tool(&["--url", &url, "migrate"]).await.ok();
    run_tool(&["--url", &url, "list"]).await.ok();
}

#[tokio::test]
async fn usage_errors_exit_with_2_and_help_with_0() {
    let no_url = run_tool(&["stats"]).await;
    assert_eq!(no_url.code, 2);
    assert!(
        no_url.stderr.contains("ASYNC_EXEC_DATABASE_URL"),
        "{}",
        no_url.stderr
    );
    let url = ["--url", "sqlite::memory:"];
    let bad_status = run_tool(&[&url[..], &["list", "--status", "Dead"]].concat()).await;
    assert_eq!(bad_status.code, 2);
    assert!(
        bad_status
            .stderr
            .contains("init, running, success, failed, dead, cancelled"),
        "{}",
        bad_status.stderr
    );
    for args in [
        &["frobnicate"][..],
        &["show"],
        &["show", "x"],
        &["retry"],
        &["list", "--limit", "0"],
        &["list", "--since", "yesterday"],
        &["list", "--limit", "1001"],
        &["list", "--after", "1764547200000.4711"],
        &["list", "--after", "x"],
        &["list", "--before", "2"],
        &["purge", "--older-than", "7"],
        &["purge", "--batch", "5000"],
    ] {
        let run = run_tool(&[&url[..], args].concat()).await;
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(!run.stderr.is_empty());
    }
    let help = run_tool(&["--help"]).await.ok();
    for command in [
        "migrate", "stats", "list", "show", "retry", "cancel", "delete", "purge",
    ] {
        assert!(help.stdout.contains(command), "{}", help.stdout);
    }
    // The URL may come from the environment.
    let from_env = tokio::process::Command::new(BINARY)
        .args(["--json", "migrate"])
        .env("ASYNC_EXEC_DATABASE_URL", "sqlite::memory:")
        .output()
        .await
        .unwrap();
    assert!(
        from_env.status.success(),
        "{}",
        String::from_utf8_lossy(&from_env.stderr)
    );
}
