//! Issue 9: what the console's pages show an operator, over HTTP on every backend: the
//! overview's charts up to date right after activity (the queue depth's last point is the
//! cards' counts; the current minute's finished counts include what this instance has not
//! written to `async_stat` yet), the attempts of a replayed request told apart by their
//! run, times with their zone, and empty states that say what is empty.
#![cfg(feature = "console")]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::console;
use async_exec::{async_exec, Backend, Runtime, TestMode};
use axum::http::StatusCode;
use axum::Router;
use common::console::*;
use common::TestDb;
use serde_json::{json, Value};

#[async_exec(type = SaveAsync, name = "views::doomed", max_attempts = 1)]
async fn doomed(label: String) -> anyhow::Result<()> {
    anyhow::bail!("boom: {label}")
}

#[async_exec(type = SaveAsync, name = "views::fine")]
async fn fine(label: String) -> anyhow::Result<()> {
    let _ = label;
    Ok(())
}

/// The console mounted under [`MOUNT`], counting on every view (the cards show now).
fn counting(rt: &Runtime) -> Router {
    let config = config().counts_max_age(Duration::ZERO);
    Router::new().nest(MOUNT, console::router(rt, config).unwrap())
}

/// The `data-<name>` attribute of the element with `id`, in `html`.
fn attribute(html: &str, id: &str, name: &str) -> Option<String> {
    let at = html.find(&format!(r#"id="{id}""#))?;
    let tag = &html[at..at + html[at..].find('>')?];
    let start = tag.find(&format!(r#"{name}=""#))? + name.len() + 2;
    Some(tag[start..start + tag[start..].find('"')?].to_string())
}

/// The text of the first `<figcaption>` after `id`.
fn caption(html: &str, id: &str) -> String {
    let at = html.find(&format!(r#"id="{id}""#)).unwrap();
    let rest = &html[at..];
    let start = rest.find("<figcaption>").unwrap() + "<figcaption>".len();
    let end = rest.find("</figcaption>").unwrap();
    rest[start..end].to_string()
}

fn count_of(overview: &Value, status: &str) -> i64 {
    overview["by_status"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["status"] == status)
        .unwrap()["count"]
        .as_i64()
        .unwrap()
}

fn finished(overview: &Value) -> (i64, i64) {
    overview["finished_per_minute"]
        .as_array()
        .unwrap()
        .iter()
        .fold((0, 0), |(ok, dead), m| {
            (
                ok + m["succeeded"].as_i64().unwrap(),
                dead + m["failed"].as_i64().unwrap(),
            )
        })
}

/// Right after activity, before `async_stat` is written (every two seconds) or the queue
/// depth sampled (every minute): the depth chart ends with the cards' counts, and the
/// finished charts count what this instance just finished.
async fn the_charts_show_the_current_minute_at_once<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .delete_on_success(false)
        .start()
        .await
        .unwrap();
    let app = counting(&rt);
    let (cookie, _) = login(&app, "victor", "viewer pass").await;
    let viewer = Auth::Cookie(&cookie);
    let bot = Auth::Bearer(VIEWER_TOKEN);
    // Nothing yet: the charts say so.
    let empty = get(&app, "", viewer).await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(
        caption(&empty.body, "chart-hour").contains("0 succeeded"),
        "{}",
        empty.body
    );
    assert!(empty.body.contains("nothing finished in this span"));
    assert!(empty.body.contains("per minute"), "the value axis's unit");
    assert!(empty.body.contains(" UTC"), "axis times say their zone");
    assert!(empty.body.contains("1 request</text>"), "{}", empty.body);
    assert!(!empty.body.contains("1 requests"), "one, singular");
    assert!(
        empty.body.contains("nothing finished</div>"),
        "the failure rate's card"
    );
    for i in 0..3 {
        fine(format!("ok {i}")).on(&rt).await.unwrap();
    }
    doomed("dead".into()).on(&rt).await.unwrap();
    // Four waiting, counted now.
    let overview = get(&app, "/api/overview", bot).await.json();
    assert_eq!(count_of(&overview, "init"), 4);
    let depth = overview["queue_depth"].as_array().unwrap();
    let last = depth.last().expect("a live point");
    assert_eq!(
        (last["waiting"].as_i64(), last["running"].as_i64()),
        (Some(4), Some(0)),
        "the last depth point is the cards' count: {depth:?}"
    );
    let page = get(&app, "", viewer).await.body;
    assert_eq!(
        attribute(&page, "count-init", "data-count").as_deref(),
        Some("4")
    );
    assert_eq!(
        attribute(&page, "chart-depth", "data-waiting").as_deref(),
        Some("4")
    );
    assert_eq!(
        attribute(&page, "chart-depth", "data-running").as_deref(),
        Some("0")
    );
    let depth_caption = caption(&page, "chart-depth");
    assert!(
        depth_caption.contains("now 4 waiting, 0 running"),
        "{depth_caption}"
    );
    assert!(page.contains("<circle"), "the live point is drawn");
    // Run them: the finished counts show at once, not after the next write.
    let report = rt.run_due().await.unwrap();
    assert_eq!((report.succeeded, report.failed), (3, 1), "{report:?}");
    let overview = get(&app, "/api/overview", bot).await.json();
    assert_eq!(finished(&overview), (3, 1), "{overview}");
    assert_eq!(overview["failure_rate_last_hour"].as_f64(), Some(0.25));
    let page = get(&app, "", viewer).await.body;
    assert_eq!(
        attribute(&page, "chart-hour", "data-succeeded").as_deref(),
        Some("3")
    );
    assert_eq!(
        attribute(&page, "chart-hour", "data-failed").as_deref(),
        Some("1")
    );
    assert_eq!(
        attribute(&page, "chart-day", "data-succeeded").as_deref(),
        Some("3")
    );
    assert!(!page.contains("nothing finished in this span"), "{page}");
    // Once written, they are counted once.
    rt.shutdown().await.unwrap();
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .start()
        .await
        .unwrap();
    let overview = get(&mounted(&rt), "/api/overview", bot).await.json();
    assert_eq!(finished(&overview), (3, 1), "{overview}");
    rt.shutdown().await.unwrap();
}

/// After a replay the attempts start again at 1: each shows its run, in the order logged,
/// on the page and in the JSON.
async fn a_replayed_request_shows_each_run<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .test_mode(TestMode::Hold)
        .delete_on_success(false)
        .log_success(true)
        .start()
        .await
        .unwrap();
    let id = doomed("twice".into()).on(&rt).await.unwrap().id.unwrap();
    rt.run_due().await.unwrap();
    let app = mounted(&rt);
    let operator = Auth::Bearer(OPERATOR_TOKEN);
    let (cookie, _) = login(&app, "victor", "viewer pass").await;
    let viewer = Auth::Cookie(&cookie);
    for _ in 0..2 {
        let body = json!({"action": "replay_dead", "filter": {"id": id}, "up_to": 1});
        let replayed = post_json(&app, "/api/actions", operator, None, body).await;
        assert_eq!(replayed.json()["changed"], 1, "{}", replayed.body);
        rt.run_due().await.unwrap();
    }
    let detail = get(&app, &format!("/api/requests/{id}"), operator)
        .await
        .json();
    let attempts = detail["attempts"].as_array().unwrap();
    let seen: Vec<(i64, i64, i64, bool)> = attempts
        .iter()
        .map(|a| {
            (
                a["seq"].as_i64().unwrap(),
                a["run"].as_i64().unwrap(),
                a["attempt"].as_i64().unwrap(),
                a["replayed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [(1, 1, 1, false), (2, 2, 1, true), (3, 3, 1, true)],
        "{detail}"
    );
    assert_eq!(attempts[2]["outcome"], "error", "the log's fields stay");
    let page = get(&app, &format!("/requests/{id}"), viewer).await.body;
    assert_eq!(
        attribute(&page, "attempts", "data-runs").as_deref(),
        Some("3")
    );
    for run in 1..=3 {
        assert!(
            page.contains(&format!(
                r#"data-seq="{run}" data-run="{run}" data-attempt="1""#
            )),
            "run {run}: {page}"
        );
        assert!(page.contains(&format!("run {run}, attempt 1")), "{page}");
    }
    assert_eq!(page.matches("started over").count(), 2, "{page}");
    assert!(page.contains("1 of 1 in run 3"), "{page}");
    assert!(
        !page.contains("runs at"),
        "a dead request runs at no time: {page}"
    );
    // Times say their zone.
    assert!(page.contains(" UTC</time>"), "{page}");
    // Counts in words: one request, singular.
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let id_text = id.to_string();
    let fields = [
        ("csrf", csrf.as_str()),
        ("action", "replay_dead"),
        ("id", &id_text),
    ];
    let confirm = post_form(&app, "/actions", Auth::Cookie(&cookie), &fields).await;
    assert!(
        confirm
            .body
            .contains("1 request</strong> matches the filter and is dead."),
        "{}",
        confirm.body
    );
    let confirmed = [fields.as_slice(), &[("confirm", "yes"), ("up_to", "1")]].concat();
    let done = post_form(&app, "/actions", Auth::Cookie(&cookie), &confirmed).await;
    let location = done.location.unwrap_or_default();
    assert!(
        location.ends_with("notice=done&action=replay_dead&changed=1"),
        "{location}"
    );
    let shown = get(
        &app,
        &location["/ops/console".len()..],
        Auth::Cookie(&cookie),
    )
    .await;
    assert!(
        shown.body.contains("Replay dead: 1 request changed"),
        "{}",
        shown.body
    );
    // One run: no run numbers to read past.
    let once = doomed("once".into()).on(&rt).await.unwrap().id.unwrap();
    rt.run_due().await.unwrap();
    let page = get(&app, &format!("/requests/{once}"), viewer).await.body;
    assert!(page.contains("attempt 1"), "{page}");
    assert!(!page.contains("run 1"), "{page}");
    rt.shutdown().await.unwrap();
}

/// Pages with nothing to list say so.
async fn empty_pages_say_what_is_empty<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    // The open loopback console: its logins are not audited (with users, each one is),
    // so the trail is empty.
    let open = console::ConsoleConfig::new().listen("127.0.0.1:8080".parse().unwrap());
    let app = Router::new().nest(MOUNT, console::router(&rt, open).unwrap());
    let (cookie, _) = login(&app, "local", "").await;
    let viewer = Auth::Cookie(&cookie);
    let audit = get(&app, "/audit", viewer).await.body;
    assert!(audit.contains(r#"id="no-audit""#), "{audit}");
    let overview = get(&app, "", viewer).await.body;
    assert!(
        overview.contains(r#"id="no-executor-counts""#),
        "{overview}"
    );
    rt.shutdown().await.unwrap();
}

backend_suite!(
    the_charts_show_the_current_minute_at_once,
    a_replayed_request_shows_each_run,
    empty_pages_say_what_is_empty,
);
