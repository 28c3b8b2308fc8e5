//! Issue 20 in the console. The policies page: every queue's policy as stored; operators
//! change one with its form (audited under their name, applied by every instance within
//! about a second); viewers see no form and are refused; values out of range are refused
//! with the range, and nothing is written. A request's page: its result (a partial
//! success said so), and for a running one, a button that asks it to stop.
#![cfg(feature = "console")]
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use async_exec::{async_exec, Backend, Context, Partial, Status};
use axum::http::StatusCode;
use common::console::*;
use common::TestDb;

/// A report, in the `reports` queue.
#[async_exec(type = SaveAsync, name = "console_policies::report", queue = "reports")]
async fn report(n: i64) {
    let _ = n;
}

async fn the_policies_page_shows_and_changes_a_policy<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let alice = Auth::Cookie(&cookie);
    let page = get(&app, "/policies", alice).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains(r#"data-policy="reports""#),
        "{}",
        page.body
    );
    assert!(page.body.contains("code's"));
    assert!(page.body.contains(r#"id="nav-policies""#));

    let form = [
        ("csrf", csrf.as_str()),
        ("name", "reports"),
        ("paused", "true"),
        ("concurrency", "3"),
        ("max_attempts", "4"),
        ("backoff_base", "1s"),
        ("backoff_cap", "1m"),
        ("timeout", "90s"),
        ("priority_boost", "-2"),
    ];
    let applied = post_form(&app, "/policies", alice, &form).await;
    assert_eq!(applied.status, StatusCode::SEE_OTHER, "{}", applied.body);
    let policies = rt.queue_policies().await.unwrap();
    let reports = policies.iter().find(|p| p.queue == "reports").unwrap();
    assert!(reports.paused);
    assert_eq!(
        (
            reports.concurrency,
            reports.max_attempts,
            reports.backoff_base_ms,
            reports.backoff_cap_ms,
            reports.timeout_ms,
            reports.priority_boost
        ),
        (
            Some(3),
            Some(4),
            Some(1_000),
            Some(60_000),
            Some(90_000),
            Some(-2)
        )
    );
    assert_eq!(reports.changed_by.as_deref(), Some("alice"));
    let location = applied.location.as_deref().unwrap();
    let shown = get(&app, location.strip_prefix(MOUNT).unwrap(), alice).await;
    assert!(shown.body.contains("Policy changed"), "{}", shown.body);
    assert!(shown.body.contains("paused"));

    // The form sets every field: empty ones go back to the code's.
    let cleared = [
        ("csrf", csrf.as_str()),
        ("name", "reports"),
        ("timeout", "5s"),
    ];
    post_form(&app, "/policies", alice, &cleared).await;
    let policies = rt.queue_policies().await.unwrap();
    let reports = policies.iter().find(|p| p.queue == "reports").unwrap();
    assert!(!reports.paused);
    assert_eq!(
        (reports.concurrency, reports.timeout_ms),
        (None, Some(5_000))
    );

    // Out of range, half a backoff, an unknown name: refused, saying why.
    for (field, value, says) in [
        ("max_attempts", "0", "between 1 and"),
        ("backoff_base", "1s", "give both"),
        ("timeout", "soon", "not a duration"),
        ("concurrency", "-1", "not a whole number"),
    ] {
        let bad = [("csrf", csrf.as_str()), ("name", "reports"), (field, value)];
        let refused = post_form(&app, "/policies", alice, &bad).await;
        assert!(
            refused.status.is_client_error(),
            "{field}={value}: {}",
            refused.status
        );
        assert!(refused.body.contains(says), "{field}: {}", refused.body);
    }
    let unknown = [("csrf", csrf.as_str()), ("name", "reprots")];
    let refused = post_form(&app, "/policies", alice, &unknown).await;
    assert!(refused.status.is_client_error());
    assert!(
        refused.body.contains("no queue or executor"),
        "{}",
        refused.body
    );

    // A viewer sees the page, no form, and cannot post.
    let (viewer_cookie, viewer_csrf) = login(&app, "victor", "viewer pass").await;
    let victor = Auth::Cookie(&viewer_cookie);
    let page = get(&app, "/policies", victor).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        !page.body.contains("<form class=\"policy\""),
        "{}",
        page.body
    );
    let attempt = [
        ("csrf", viewer_csrf.as_str()),
        ("name", "reports"),
        ("paused", "true"),
    ];
    let refused = post_form(&app, "/policies", victor, &attempt).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let trail = rt.audit_trail(20).await.unwrap();
    let changes: Vec<_> = trail.iter().filter(|e| e.action == "policy").collect();
    assert_eq!(changes.len(), 2, "{trail:?}");
    assert!(changes.iter().all(|e| e.actor == "alice"));

    // The JSON API: a list, and a change of the fields given (others kept), by operators.
    let listed = get(&app, "/api/policies", alice).await;
    assert_eq!(listed.status, StatusCode::OK);
    assert!(listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["queue"] == "reports"));
    let body = serde_json::json!({"name": "reports", "max_attempts": 6});
    let changed = post_json(&app, "/api/policies", alice, Some(&csrf), body.clone()).await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.body);
    assert_eq!(changed.json()["max_attempts"], 6);
    assert_eq!(changed.json()["timeout_ms"], 5_000, "kept");
    let refused = post_json(&app, "/api/policies", victor, Some(&viewer_csrf), body).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let bad = serde_json::json!({"name": "reports", "max_attempts": 0});
    let refused = post_json(&app, "/api/policies", alice, Some(&csrf), bad).await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.body
    );
    let typo = serde_json::json!({"name": "reports", "max_attempt": 3});
    let refused = post_json(&app, "/api/policies", alice, Some(&csrf), typo).await;
    assert!(refused.status.is_client_error());
    rt.shutdown().await.unwrap();
}

/// Imports, with one row refused.
#[async_exec(type = SaveAsync, name = "console_policies::import")]
async fn import(rows: u64) -> anyhow::Result<Partial> {
    Ok(Partial::new(
        rows - 1,
        1,
        serde_json::json!({ "rejected": ["row 3"] }),
    ))
}

/// Works until told to stop.
#[async_exec(type = SaveAsync, name = "console_policies::long")]
async fn long(n: i64, ctx: Context) -> anyhow::Result<()> {
    let _ = n;
    ctx.cancelled().await;
    anyhow::bail!("stopped")
}

async fn a_requests_page_shows_its_result_and_stops_it<DB: Backend>(db: TestDb) {
    let rt = db.builder().delete_on_success(false).start().await.unwrap();
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let alice = Auth::Cookie(&cookie);
    let imported = import(10).on(&rt).await.unwrap().id.unwrap();
    wait_status(&rt, Status::Success, 1).await;
    let page = get(&app, &format!("/requests/{imported}"), alice).await;
    assert!(
        page.body.contains(r#"id="request-result""#),
        "{}",
        page.body
    );
    assert!(page
        .body
        .contains("Partial success: 9 went through, 1 did not"));
    assert!(page.body.contains("row 3"));

    let running = long(1).on(&rt).await.unwrap().id.unwrap();
    wait_status(&rt, Status::Running, 1).await;
    let page = get(&app, &format!("/requests/{running}"), alice).await;
    assert!(page.body.contains(r#"id="action-stop""#), "{}", page.body);
    let (viewer_cookie, viewer_csrf) = login(&app, "victor", "viewer pass").await;
    let victor = Auth::Cookie(&viewer_cookie);
    let path = format!("/requests/{running}/cancel");
    let refused = post_form(&app, &path, victor, &[("csrf", viewer_csrf.as_str())]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let asked = post_form(&app, &path, alice, &[("csrf", csrf.as_str())]).await;
    assert_eq!(asked.status, StatusCode::SEE_OTHER, "{}", asked.body);
    wait_status(&rt, Status::Cancelled, 1).await;
    let trail = rt.audit_trail(10).await.unwrap();
    assert!(
        trail
            .iter()
            .any(|e| e.action == "cancel" && e.actor == "alice" && e.affected == 1),
        "{trail:?}"
    );
    rt.shutdown().await.unwrap();
}

/// Queues on the overview and the policies page: paused or not, running and waiting; a
/// waiting request of a paused queue says so; live pages refresh themselves (the script is
/// served, the pages carry their interval), a finished request's page does not.
async fn queues_show_their_load_and_pages_refresh<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .run_workers(false)
        .delete_on_success(false)
        .start()
        .await
        .unwrap();
    let app = mounted(&rt);
    let (cookie, _) = login(&app, "alice", "operator pass").await;
    let alice = Auth::Cookie(&cookie);
    let later = std::time::Duration::from_secs(3_600);
    let mut waiting = Vec::new();
    for n in 0..3 {
        waiting.push(report(n).delay(later).on(&rt).await.unwrap().id.unwrap());
    }
    rt.policy("reports").paused(true).apply().await.unwrap();
    let overview = get(&app, "", alice).await;
    assert!(
        overview.body.contains(r#"id="queues""#),
        "{}",
        overview.body
    );
    assert!(
        overview
            .body
            .contains(r#"data-queue="reports" data-paused="true""#),
        "{}",
        overview.body
    );
    assert!(overview.body.contains("data-refresh=\"10\""));
    let policies = get(&app, "/policies", alice).await;
    let row = policies
        .body
        .split(r#"data-policy="reports""#)
        .nth(1)
        .unwrap();
    assert!(row.contains(r#"<td class="num waiting">3</td>"#), "{row}");
    let request = get(&app, &format!("/requests/{}", waiting[0]), alice).await;
    assert!(
        request.body.contains(r#"id="request-paused""#),
        "{}",
        request.body
    );
    assert!(request.body.contains("data-refresh=\"5\""));
    let script = get(&app, "/assets/console.js", Auth::None).await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(script.body.contains("data-refresh"));
    rt.cancel(waiting[1]).await.unwrap();
    let finished = get(&app, &format!("/requests/{}", waiting[1]), alice).await;
    assert!(
        !finished.body.contains("data-refresh"),
        "a finished request's page stays"
    );
    rt.shutdown().await.unwrap();
}

/// Ticked rows: the action changes those ticked and no other, audited one by one;
/// nothing ticked, or a viewer, is refused.
async fn an_action_on_ticked_rows_changes_those_only<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let alice = Auth::Cookie(&cookie);
    let later = std::time::Duration::from_secs(3_600);
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(report(n).delay(later).on(&rt).await.unwrap().id.unwrap());
    }
    let page = get(&app, "/requests", alice).await;
    assert!(page.body.contains(r#"id="selected-form""#), "{}", page.body);
    assert!(page.body.contains(r#"form="selected-form""#));
    let (a, b) = (ids[0].to_string(), ids[2].to_string());
    let fields = [
        ("csrf", csrf.as_str()),
        ("action", "cancel"),
        ("back", "/requests"),
        ("id", a.as_str()),
        ("id", b.as_str()),
    ];
    let done = post_form(&app, "/actions/selected", alice, &fields).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert!(done.location.unwrap().contains("changed=2"));
    for (i, id) in ids.iter().enumerate() {
        let status = rt.get(*id).await.unwrap().unwrap().status;
        let expected = if i == 0 || i == 2 {
            Status::Cancelled
        } else {
            Status::Init
        };
        assert_eq!(status, expected, "request {id}");
    }
    let trail = rt.audit_trail(10).await.unwrap();
    assert_eq!(
        trail
            .iter()
            .filter(|e| e.action == "cancel" && e.actor == "alice")
            .count(),
        2
    );
    let none = [("csrf", csrf.as_str()), ("action", "cancel")];
    let refused = post_form(&app, "/actions/selected", alice, &none).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let (viewer, viewer_csrf) = login(&app, "victor", "viewer pass").await;
    let c = ids[1].to_string();
    let attempt = [
        ("csrf", viewer_csrf.as_str()),
        ("action", "cancel"),
        ("id", c.as_str()),
    ];
    let refused = post_form(&app, "/actions/selected", Auth::Cookie(&viewer), &attempt).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(rt.get(ids[1]).await.unwrap().unwrap().status, Status::Init);
    rt.shutdown().await.unwrap();
}

/// Issue 30: delete asked first from a filter, not from ticked rows, where one click
/// deleted them. From ticked rows, delete shows what it will delete (how many, their
/// ids) and deletes nothing until confirmed; the other actions act at once, as before.
async fn delete_on_ticked_rows_asks_first<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    let app = mounted(&rt);
    let (cookie, csrf) = login(&app, "alice", "operator pass").await;
    let alice = Auth::Cookie(&cookie);
    let later = std::time::Duration::from_secs(3_600);
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(report(n).delay(later).on(&rt).await.unwrap().id.unwrap());
    }
    let (a, b) = (ids[0].to_string(), ids[2].to_string());
    let asked = [
        ("csrf", csrf.as_str()),
        ("action", "delete"),
        ("back", "/requests"),
        ("id", a.as_str()),
        ("id", b.as_str()),
    ];
    let confirm = post_form(&app, "/actions/selected", alice, &asked).await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
    assert!(
        confirm
            .body
            .contains(r#"id="confirm-count" data-count="2""#),
        "{}",
        confirm.body
    );
    assert!(confirm.body.contains(r#"name="confirm" value="yes""#));
    for id in &ids {
        assert!(rt.get(*id).await.unwrap().is_some(), "nothing deleted yet");
    }
    let mut confirmed = asked.to_vec();
    confirmed.push(("confirm", "yes"));
    let done = post_form(&app, "/actions/selected", alice, &confirmed).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert!(done.location.unwrap().contains("changed=2"));
    assert!(rt.get(ids[0]).await.unwrap().is_none());
    assert!(rt.get(ids[1]).await.unwrap().is_some());
    assert!(rt.get(ids[2]).await.unwrap().is_none());
    rt.shutdown().await.unwrap();
}

backend_suite!(
    an_action_on_ticked_rows_changes_those_only,
    delete_on_ticked_rows_asks_first,
    queues_show_their_load_and_pages_refresh,
    the_policies_page_shows_and_changes_a_policy,
    a_requests_page_shows_its_result_and_stops_it,
);
