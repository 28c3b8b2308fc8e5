//! Issue 19: the `async-exec` tool as an operator's: its actions in the audit trail that
//! the console shows (as `cli:<os user>`), the applications that have records when it is
//! given none or one without any, and `show` numbering the runs of a replayed request;
//! run as a process against each backend.
#![cfg(feature = "cli")]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use async_exec::{async_exec, Backend, Final};
use common::TestDb;
use serde_json::Value;

/// The binary under test, built by Cargo for this test.
const BINARY: &str = env!("CARGO_BIN_EXE_async-exec");

/// The OS user the tool runs as here.
const USER: &str = "ann-ops";

#[async_exec(type = SaveAsync, name = "cliop::ok")]
async fn ok_job(n: i64) {
    let _ = n;
}

#[async_exec(type = SaveAsync, name = "cliop::charge", queue = "payments")]
async fn charge(n: i64) {
    let _ = n;
}

#[async_exec(type = SaveAsync, name = "cliop::dead", max_attempts = 1)]
async fn dead_job(message: String) -> Result<(), Final> {
    Err(Final::new(message))
}

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

/// Runs the tool on the test's database for `application`, as the OS user [`USER`].
async fn tool(db: &TestDb, application: &str, args: &[&str]) -> Run {
    let mut all = vec!["--url", &db.url, "--application", application];
    all.extend_from_slice(args);
    let out = tokio::process::Command::new(BINARY)
        .args(&all)
        .env_remove("ASYNC_EXEC_DATABASE_URL")
        .env("USER", USER)
        .output()
        .await
        .expect("run async-exec");
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// One kept success, one dead, two waiting; the runtime that made them shut down.
async fn fixture(db: &TestDb) -> (i64, i64, Vec<i64>) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let success = ok_job(1).on(&rt).await.unwrap().id.unwrap();
    let dead = dead_job("no".into()).on(&rt).await.unwrap().id.unwrap();
    rt.wait_idle().await;
    rt.shutdown().await.unwrap();
    let submit_only = db.builder().run_workers(false).start().await.unwrap();
    let mut waiting = Vec::new();
    for n in 2..4 {
        waiting.push(ok_job(n).on(&submit_only).await.unwrap().id.unwrap());
    }
    submit_only.shutdown().await.unwrap();
    (success, dead, waiting)
}

async fn actions_are_audited_as_the_os_user<DB: Backend>(db: TestDb) {
    let (success, dead, waiting) = fixture(&db).await;
    let id = |n: i64| n.to_string();
    tool(&db, "tests", &["retry", &id(dead)]).await.ok();
    tool(&db, "tests", &["retry", "--replay", &id(success)])
        .await
        .ok();
    tool(&db, "tests", &["cancel", &id(waiting[0])]).await.ok();
    // Refused (cancelled already), and not found: audited as changing nothing.
    assert_eq!(
        tool(&db, "tests", &["cancel", &id(waiting[0])]).await.code,
        1
    );
    tool(&db, "tests", &["delete", &id(waiting[1])]).await.ok();
    let paused = tool(&db, "tests", &["--json", "pause", "cliop::ok"])
        .await
        .ok();
    assert_eq!(paused.json()["paused"], true);
    // A name that is no executor's is refused, and not audited (issue 30).
    let nosuch = tool(&db, "tests", &["pause", "cliop::nosuch"]).await;
    assert_eq!(nosuch.code, 1, "{}", nosuch.stdout);
    assert!(
        nosuch.stderr.contains("no executor is named"),
        "{}",
        nosuch.stderr
    );
    let resumed = tool(&db, "tests", &["resume", "cliop::ok"]).await.ok();
    assert!(resumed.stdout.contains("resumed"), "{}", resumed.stdout);
    tool(&db, "tests", &["purge", "--older-than", "0s"])
        .await
        .ok();

    let rt = db.builder().run_workers(false).start().await.unwrap();
    let mut trail = rt.audit_trail(100).await.unwrap();
    trail.reverse(); // oldest first
    let seen: Vec<(String, String, String, i64)> = trail
        .iter()
        .map(|e| {
            (
                e.actor.clone(),
                e.action.clone(),
                e.target.clone(),
                e.affected,
            )
        })
        .collect();
    let actor = format!("cli:{USER}");
    // As the console writes an action on one request: the query that names it.
    let on = |n: i64| serde_json::to_string(&async_exec::RequestQuery::default().id(n)).unwrap();
    let expected: [(String, String, String, i64); 7] = [
        (actor.clone(), "retry".into(), on(dead), 1),
        (actor.clone(), "replay".into(), on(success), 1),
        (actor.clone(), "cancel".into(), on(waiting[0]), 1),
        (actor.clone(), "cancel".into(), on(waiting[0]), 0),
        (actor.clone(), "delete".into(), on(waiting[1]), 1),
        (
            actor.clone(),
            "pause".into(),
            r#"{"executor":"cliop::ok"}"#.into(),
            0,
        ),
        (
            actor.clone(),
            "resume".into(),
            r#"{"executor":"cliop::ok"}"#.into(),
            0,
        ),
    ];
    assert_eq!(seen[..expected.len()], expected[..], "{seen:#?}");
    let purge = &seen[expected.len()];
    assert_eq!((&purge.0, purge.1.as_str()), (&actor, "purge"), "{seen:#?}");
    assert_eq!(seen.len(), expected.len() + 1, "{seen:#?}");
    rt.shutdown().await.unwrap();
}

async fn no_application_lists_those_with_records<DB: Backend>(db: TestDb) {
    fixture(&db).await;
    let other = db.builder().application_name("other").run_workers(false);
    let other = other.start().await.unwrap();
    ok_job(9).on(&other).await.unwrap();
    other.shutdown().await.unwrap();
    let expected = serde_json::json!([
        { "application": "other", "requests": 1 },
        { "application": "tests", "requests": 4 },
    ]);

    for command in ["stats", "list"] {
        let unnamed = tool(&db, "", &["--json", command]).await.ok().json();
        assert_eq!(unnamed["applications"], expected, "{command}: {unnamed}");
        let human = tool(&db, "", &[command]).await.ok().stdout;
        assert!(human.contains("APPLICATION"), "{human}");
        let tests_row = human.lines().find(|l| l.starts_with("tests")).unwrap();
        assert_eq!(tests_row.split_whitespace().last(), Some("4"), "{human}");
        // An application without records says so and names the others.
        let typo = tool(&db, "testz", &["--json", command]).await.ok().json();
        assert_eq!(typo["applications"], expected, "{command}: {typo}");
        let typo = tool(&db, "testz", &[command]).await.ok().stdout;
        assert!(
            typo.contains("application `testz` has no requests") && typo.contains("other"),
            "{typo}"
        );
        // One with records shows them alone.
        let named = tool(&db, "tests", &["--json", command]).await.ok().json();
        assert!(named.get("applications").is_none(), "{command}: {named}");
    }
    // A filter that matches nothing in an application with records: no list of others.
    let filtered = tool(&db, "tests", &["--json", "list", "--executor", "nope"])
        .await
        .ok()
        .json();
    assert!(filtered.get("applications").is_none(), "{filtered}");
    // Other commands need a name.
    let refused = tool(&db, "", &["retry", "1"]).await;
    assert_eq!(refused.code, 1);
    assert!(
        refused
            .stderr
            .contains("no application given: pass --application NAME"),
        "{}",
        refused.stderr
    );
    // The runtime the tool opened for an empty name left no instance behind.
    assert_eq!(db.count("async_instance").await, 0);
}

async fn show_numbers_the_runs<DB: Backend>(db: TestDb) {
    let (_, dead, _) = fixture(&db).await;
    // Replayed after it died: its second run's attempt counts from 1 again.
    tool(&db, "tests", &["retry", &dead.to_string()]).await.ok();
    let rt = db
        .builder()
        .retry_interval(std::time::Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    common::wait_for(|| async { db.count("async_log").await == 2 }).await;
    rt.wait_idle().await;
    rt.shutdown().await.unwrap();

    let shown = tool(&db, "tests", &["--json", "show", &dead.to_string()])
        .await
        .ok()
        .json();
    let runs: Vec<(i64, i64)> = shown["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["run"].as_i64().unwrap(), a["attempt"].as_i64().unwrap()))
        .collect();
    assert_eq!(runs, vec![(1, 1), (2, 1)], "{shown}");
    let human = tool(&db, "tests", &["show", &dead.to_string()])
        .await
        .ok()
        .stdout;
    let table: Vec<Vec<&str>> = human
        .lines()
        .skip_while(|l| *l != "attempts")
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(table[0][..2], ["RUN", "ATTEMPT"], "{human}");
    assert_eq!(table[1][..3], ["1", "1", "final"], "{human}");
    assert_eq!(table[2][..3], ["2", "1", "final"], "{human}");
}

/// Issue 20: `queue-limits` sets a queue's limits on every instance (audited as the OS
/// user), `queues` lists them, neither option clears them, and a queue no service names
/// is refused with the queues there are.
async fn queue_limits_are_set_from_the_tool<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap(); // its executors' queues have their rows
    let set = tool(
        &db,
        "tests",
        &["--json", "queue-limits", "payments", "--concurrency", "3"],
    )
    .await
    .ok()
    .json();
    assert_eq!(set["concurrency"], 3, "{set}");
    let policies = rt.queue_policies().await.unwrap();
    assert_eq!(policies.len(), 1, "{policies:?}");
    assert_eq!(
        (policies[0].concurrency, policies[0].per_instance),
        (Some(3), None)
    );
    assert_eq!(
        policies[0].changed_by.as_deref(),
        Some(&*format!("cli:{USER}"))
    );
    let listed = tool(&db, "tests", &["queues"]).await.ok().stdout;
    assert!(
        listed.contains("payments") && listed.contains('3'),
        "{listed}"
    );
    tool(&db, "tests", &["queue-limits", "payments"]).await.ok();
    let policies = rt.queue_policies().await.unwrap();
    assert_eq!(
        (policies[0].concurrency, policies[0].per_instance),
        (None, None)
    );
    let trail = rt.audit_trail(10).await.unwrap();
    assert_eq!(
        trail.iter().filter(|e| e.action == "queue-limits").count(),
        2,
        "{trail:?}"
    );
    let refused = tool(
        &db,
        "tests",
        &["queue-limits", "paymnets", "--concurrency", "1"],
    )
    .await;
    assert_ne!(refused.code, 0);
    assert!(
        refused
            .stderr
            .contains("no executor names queue \"paymnets\"")
            && refused
                .stderr
                .contains("the services' executors name: payments"),
        "{}",
        refused.stderr
    );
    rt.shutdown().await.unwrap();
}

/// `list --tag` lists a tag's requests and `cancel --tag` cancels the waiting ones, as an
/// audited action; `cancel` of a running request asks it to stop.
async fn tags_list_and_cancel_from_the_tool<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let later = std::time::Duration::from_secs(3_600);
    let mut tagged = Vec::new();
    for n in 0..3 {
        let id = ok_job(n).tag("order:5").delay(later).on(&rt).await.unwrap();
        tagged.push(id.id.unwrap());
    }
    let other = ok_job(9).tag("order:6").delay(later).on(&rt).await.unwrap();
    // Issue 30: a running one is asked to stop too (it was left alone before).
    let running = ok_job(4)
        .tag("order:5")
        .delay(later)
        .on(&rt)
        .await
        .unwrap()
        .id
        .unwrap();
    db.exec(&format!(
        "UPDATE async_req SET status = 'running', lease_owner = 'other', lease_until = {}, \
         exec_count = 1 WHERE id = {running}",
        common::now_ms() + 3_600_000
    ))
    .await;
    let listed = tool(&db, "tests", &["--json", "list", "--tag", "order:5"])
        .await
        .ok()
        .json();
    let mut ids: Vec<i64> = listed["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    let mut all = tagged.clone();
    all.push(running);
    assert_eq!(ids, all, "{listed}");
    assert_eq!(
        listed["requests"][0]["tags"],
        serde_json::json!(["order:5"])
    );
    let cancelled = tool(&db, "tests", &["--json", "cancel", "--tag", "order:5"])
        .await
        .ok()
        .json();
    assert_eq!(cancelled["cancelled"], 3, "{cancelled}");
    assert_eq!(cancelled["stop_asked"], 1, "{cancelled}");
    let asked = rt.get(running).await.unwrap().unwrap();
    assert!(asked.cancel_requested.is_some(), "{asked:?}");
    for id in &tagged {
        assert_eq!(
            rt.get(*id).await.unwrap().unwrap().status,
            async_exec::Status::Cancelled
        );
    }
    let other = rt.get(other.id.unwrap()).await.unwrap().unwrap();
    assert_eq!(other.status, async_exec::Status::Init);
    let trail = rt.audit_trail(10).await.unwrap();
    let action = trail
        .iter()
        .find(|e| e.action == "cancel")
        .expect("audited");
    assert!(action.target.contains("order:5"), "{action:?}");
    assert_eq!(action.affected, 4);
    let both = tool(&db, "tests", &["cancel", "1", "--tag", "order:5"]).await;
    assert_ne!(both.code, 0, "ids and a tag at once are refused");
    rt.shutdown().await.unwrap();
}

/// `policy` changes a queue's and an executor's policy from the tool (an executor in no
/// queue known from the instances' announcements), audited; `queues` shows it; a value
/// out of range is refused with the range.
async fn policies_are_changed_from_the_tool<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    tool(
        &db,
        "tests",
        &["policy", "payments", "--paused", "true", "--timeout", "90s"],
    )
    .await
    .ok();
    tool(
        &db,
        "tests",
        &[
            "policy",
            "cliop::ok",
            "--max-attempts",
            "2",
            "--backoff-base",
            "1s",
            "--backoff-cap",
            "1m",
            "--priority-boost",
            "-3",
        ],
    )
    .await
    .ok();
    let policies = rt.queue_policies().await.unwrap();
    let payments = policies.iter().find(|p| p.queue == "payments").unwrap();
    assert!(payments.paused);
    assert_eq!(payments.timeout_ms, Some(90_000));
    let ok = policies.iter().find(|p| p.queue == "cliop::ok").unwrap();
    assert_eq!(
        (
            ok.max_attempts,
            ok.backoff_base_ms,
            ok.backoff_cap_ms,
            ok.priority_boost
        ),
        (Some(2), Some(1_000), Some(60_000), Some(-3))
    );
    assert_eq!(ok.changed_by.as_deref(), Some(&*format!("cli:{USER}")));
    let listed = tool(&db, "tests", &["queues"]).await.ok().stdout;
    assert!(
        listed.contains("paused") && listed.contains("90s"),
        "{listed}"
    );
    let refused = tool(&db, "tests", &["policy", "payments", "--max-attempts", "0"]).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("between 1 and"),
        "{}",
        refused.stderr
    );
    tool(&db, "tests", &["policy", "payments", "--reset"])
        .await
        .ok();
    let policies = rt.queue_policies().await.unwrap();
    let payments = policies.iter().find(|p| p.queue == "payments").unwrap();
    assert!(!payments.paused && payments.timeout_ms.is_none());
    let trail = rt.audit_trail(20).await.unwrap();
    assert_eq!(trail.iter().filter(|e| e.action == "policy").count(), 3);
    rt.shutdown().await.unwrap();
}

/// Issue 30: `flow QUEUE` shows what runs and waits in a queue per partition, the most
/// waiting first; an unknown queue is refused, naming `queues`.
async fn flow_shows_a_queue_per_partition<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    for (order, tenant) in [(1, "acme"), (2, "acme"), (3, "globex")] {
        charge(order).partition(tenant).on(&rt).await.unwrap();
    }
    let flow = tool(&db, "tests", &["--json", "flow", "payments"])
        .await
        .ok()
        .json();
    assert_eq!(flow["flow"]["waiting"], 3, "{flow}");
    assert_eq!(flow["flow"]["partitions"][0]["partition"], "acme", "{flow}");
    assert_eq!(flow["flow"]["partitions"][0]["waiting"], 2, "{flow}");
    // Issue 30 item 7: due, lag and the verdict (no instance runs workers: nothing starts).
    assert_eq!(flow["flow"]["due"], 3, "{flow}");
    assert!(flow["flow"]["lag_ms"].is_i64(), "{flow}");
    let verdict = flow["flow"]["verdict"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        ["backlogged", "stuck"].contains(&verdict.as_str()),
        "{flow}"
    );
    let human = tool(&db, "tests", &["flow", "payments"]).await.ok().stdout;
    assert!(
        human.contains("globex") && human.contains("3 waiting") && human.contains("3 due"),
        "{human}"
    );
    let refused = tool(&db, "tests", &["flow", "paymnets"]).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("async-exec queues"),
        "{}",
        refused.stderr
    );
    rt.shutdown().await.unwrap();
}

/// Issue 30: `partition QUEUE PARTITION` gives a tenant its own weight, concurrency and
/// rate (audited as the OS user), `flow` shows them, `--clear` clears them; a rate the
/// tool cannot read is a usage error, an absurd value is refused.
async fn partition_settings_are_set_from_the_tool<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    charge(1).partition("acme").on(&rt).await.unwrap();
    let args = [
        "--json",
        "partition",
        "payments",
        "acme",
        "--weight",
        "3",
        "--concurrency",
        "2",
        "--rate",
        "600/minute",
    ];
    let set = tool(&db, "tests", &args).await.ok().json();
    assert_eq!(set["settings"]["weight"], 3, "{set}");
    let listed = rt.partition_settings("payments", None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].settings.rate_limit(),
        Some(async_exec::Rate::per_minute(600))
    );
    assert_eq!(
        listed[0].changed_by.as_deref(),
        Some(&*format!("cli:{USER}"))
    );
    let human = tool(&db, "tests", &["flow", "payments"]).await.ok().stdout;
    assert!(human.contains("weight 3, 2 at once, 600/minute"), "{human}");
    let bad_rate = tool(
        &db,
        "tests",
        &["partition", "payments", "acme", "--rate", "5/week"],
    )
    .await;
    assert_eq!(bad_rate.code, 2, "{}", bad_rate.stderr);
    let zero = tool(
        &db,
        "tests",
        &["partition", "payments", "acme", "--weight", "0"],
    )
    .await;
    assert_ne!(zero.code, 0);
    assert!(
        zero.stderr.contains("weight must be between 1 and 1000"),
        "{}",
        zero.stderr
    );
    tool(&db, "tests", &["partition", "payments", "acme", "--clear"])
        .await
        .ok();
    assert!(rt
        .partition_settings("payments", None, 10)
        .await
        .unwrap()
        .is_empty());
    let trail = rt.audit_trail(10).await.unwrap();
    let actions: Vec<&str> = trail.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions[..2],
        ["partition-clear", "partition"],
        "{actions:?}"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    partition_settings_are_set_from_the_tool,
    flow_shows_a_queue_per_partition,
    policies_are_changed_from_the_tool,
    tags_list_and_cancel_from_the_tool,
    queue_limits_are_set_from_the_tool,
    actions_are_audited_as_the_os_user,
    no_application_lists_those_with_records,
    show_numbers_the_runs,
);
