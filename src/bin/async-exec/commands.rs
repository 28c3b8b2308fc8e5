//! The subcommands: each returns what to print, as JSON and for people.

use async_exec::{
    AttemptLog, Error, Order, PageSpec, Purge, Request, RequestId, RequestQuery, Runtime, Status,
};
use serde_json::{json, Value};

use crate::args::{ListArgs, PurgeArgs};
use crate::failure::Failure;
use crate::render::{cell, safe, table};
use crate::time::format_ms;

/// What a command printed: one JSON document, or text for people; and whether some of
/// the requests it was given failed (exit status 1 after printing).
#[derive(Debug)]
pub(crate) struct Printed {
    pub(crate) json: Value,
    pub(crate) human: String,
    pub(crate) failed: Option<String>,
}

impl Printed {
    pub(crate) fn ok(json: Value, human: String) -> Self {
        Printed {
            json,
            human,
            failed: None,
        }
    }
}

/// `migrate`: the runtime migrated when it started.
pub(crate) fn migrate(database: &str) -> Printed {
    Printed::ok(
        json!({ "migrated": true, "database": database }),
        format!("the async-exec tables are up to date in {database}\n"),
    )
}

/// `stats`: requests by status, zeros included.
pub(crate) async fn stats(rt: &Runtime) -> Result<Printed, Failure> {
    let counts = rt.count_by_status().await?;
    let total: i64 = counts.iter().map(|(_, n)| n).sum();
    let by_status: serde_json::Map<String, Value> = counts
        .iter()
        .map(|(status, n)| (status.to_string(), json!(n)))
        .collect();
    let mut rows: Vec<Vec<String>> = counts
        .iter()
        .map(|(status, n)| vec![status.to_string(), n.to_string()])
        .collect();
    rows.push(vec!["total".into(), total.to_string()]);
    let mut json = json!({ "application": rt.settings().application_name, "counts": by_status, "total": total });
    let mut human = format!(
        "application {}\n{}",
        safe(&rt.settings().application_name),
        table(&["STATUS", "COUNT"], &rows)
    );
    if total == 0 {
        elsewhere(rt, &mut json, &mut human).await?;
    }
    Ok(Printed::ok(json, human))
}

/// `stats` and `list` without an application: the applications that have requests.
pub(crate) async fn applications_only(rt: &Runtime) -> Result<Printed, Failure> {
    let (applications, human) = crate::operator::applications(rt).await?;
    Ok(Printed::ok(
        json!({ "applications": applications }),
        format!("no application given; applications with requests:\n{human}"),
    ))
}

/// For an application without any request: says so, and which applications have some
/// (`applications` in the JSON), so that a wrong `--application` does not look like an
/// empty queue.
async fn elsewhere(rt: &Runtime, json: &mut Value, human: &mut String) -> Result<(), Failure> {
    let (applications, listed) = crate::operator::applications(rt).await?;
    human.push_str(&format!(
        "application `{}` has no requests; applications with requests:\n{listed}",
        safe(&rt.settings().application_name)
    ));
    json["applications"] = applications;
    Ok(())
}

/// `list`: one page of requests, and how to ask for the next one.
pub(crate) async fn list(rt: &Runtime, a: ListArgs) -> Result<Printed, Failure> {
    let mut query = RequestQuery::default();
    query.status = a.status;
    query.executor = a.executor;
    query.key = a.key;
    query.id = a.id;
    query.tag = a.tag;
    if let Some(arg) = &a.arg {
        let Some((path, value)) = arg.split_once(':') else {
            return Err(Failure::Failed(format!(
                "--arg {arg}: write the path and the value as `user.id:42`"
            )));
        };
        query.arg = Some((path.trim().to_string(), value.to_string()));
    }
    query.any_case = a.any_case;
    query.remark = a.remark;
    query.error = a.error;
    query.created_from = a.since;
    query.created_to = a.until;
    let order = if a.oldest {
        Order::Oldest
    } else {
        Order::Newest
    };
    let mut spec = PageSpec::default()
        .order(order)
        .limit(a.limit)
        .search_window(a.search_window);
    spec.after = a.after;
    let page = rt.list(&query, &spec).await?;
    let (requests, next, searched) = (page.requests, page.next, page.searched);
    let rows: Vec<Vec<String>> = requests.iter().map(list_row).collect();
    let mut human = if rows.is_empty() {
        "no requests match\n".to_string()
    } else {
        table(
            &[
                "ID",
                "STATUS",
                "EXECUTOR",
                "TRIES",
                "CREATED",
                "UPDATED",
                "KEY",
                "LAST ERROR",
            ],
            &rows,
        )
    };
    if let Some(searched) = searched {
        human.push_str(&format!(
            "searched {searched} requests without filling the page\n"
        ));
    }
    if let Some(next) = next {
        let oldest = if a.oldest { "--oldest " } else { "" };
        human.push_str(&format!("next page: {oldest}--after {next}\n"));
    }
    let mut json = json!({
        "requests": requests,
        "next": next.map(|cursor| cursor.to_text()),
        "searched": searched,
    });
    if requests.is_empty() && rt.count_by_status().await?.iter().all(|(_, n)| *n == 0) {
        elsewhere(rt, &mut json, &mut human).await?;
    }
    Ok(Printed::ok(json, human))
}

fn list_row(r: &Request) -> Vec<String> {
    vec![
        r.id.to_string(),
        r.status.to_string(),
        cell(&r.executor, 48),
        format!("{}/{}", r.exec_count, r.max_attempts),
        format_ms(r.create_time),
        format_ms(r.update_time),
        r.idempotency_key
            .as_deref()
            .map_or(String::new(), |k| cell(k, 24)),
        r.last_error
            .as_deref()
            .map_or(String::new(), |e| cell(e, 60)),
    ]
}

/// `show ID`: the request and its attempts.
pub(crate) async fn show(rt: &Runtime, id: RequestId) -> Result<Printed, Failure> {
    let Some(request) = rt.get(id).await? else {
        return Err(not_found(rt, id));
    };
    let attempts = rt.attempts(id).await?;
    // What the body returned, when the record keeps it.
    let result = rt.result::<Value>(id).await.ok().flatten();
    let mut human = show_human(&request, &attempts);
    if let Some(value) = &result {
        human.push_str("result\n");
        human.push_str(&indented(
            &serde_json::to_string_pretty(value).unwrap_or_default(),
        ));
    }
    // Each attempt numbered by its run: a replay's attempts count from 1 again, the runs
    // go on.
    let numbered: Vec<Value> = attempts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut value = serde_json::to_value(a).expect("an attempt serializes");
            value["run"] = json!(i + 1);
            value
        })
        .collect();
    Ok(Printed::ok(
        json!({ "request": request, "attempts": numbered, "result": result }),
        human,
    ))
}

fn not_found(rt: &Runtime, id: RequestId) -> Failure {
    Failure::Failed(format!(
        "no request with id {id} in application `{}` (another application's? pass --application)",
        safe(&rt.settings().application_name)
    ))
}

fn show_human(r: &Request, attempts: &[AttemptLog]) -> String {
    let mut fields: Vec<(&str, String)> = vec![
        ("id", r.id.to_string()),
        ("status", r.status.to_string()),
        ("executor", safe(&r.executor)),
        ("application", safe(&r.application_name)),
        ("strategy", safe(&r.strategy)),
        ("sign", safe(&r.sign)),
        ("remark", safe(&r.remark)),
        ("key", r.idempotency_key.as_deref().map_or("-".into(), safe)),
        ("priority", r.priority.to_string()),
        (
            "attempts",
            format!("{} of {}", r.exec_count, r.max_attempts),
        ),
        ("created", format_ms(r.create_time)),
        ("updated", format_ms(r.update_time)),
        ("run at", format_ms(r.run_at)),
    ];
    if let Some(owner) = &r.lease_owner {
        let until = r
            .lease_until
            .map_or(String::new(), |t| format!(" until {}", format_ms(t)));
        fields.push(("lease", format!("{}{until}", safe(owner))));
    }
    if let Some(trace) = &r.trace_json {
        fields.push(("baggage", safe(trace)));
    }
    if let Some(p) = r.progress {
        fields.push(("progress", progress_text(p)));
    }
    if !r.tags.is_empty() {
        fields.push(("tags", safe(&r.tags.join(", "))));
    }
    if let Some(deadline) = r.deadline_at {
        fields.push(("deadline", format_ms(deadline)));
    }
    if let (Some(asked), Status::Running) = (r.cancel_requested, r.status) {
        fields.push(("cancel", format!("asked at {}", format_ms(asked))));
    }
    let mut out = String::new();
    for (name, value) in fields {
        out.push_str(&format!("{name:<12}{value}\n"));
    }
    if let Some(error) = &r.last_error {
        out.push_str("last error\n");
        out.push_str(&indented(error));
    }
    out.push_str("arguments\n");
    let arguments = serde_json::from_str::<Value>(&async_exec::mask_sealed(&r.param_json))
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| r.param_json.clone());
    out.push_str(&indented(&arguments));
    if attempts.is_empty() {
        out.push_str("no attempts logged\n");
    } else {
        let rows: Vec<Vec<String>> = attempts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                vec![
                    (i + 1).to_string(),
                    a.attempt.to_string(),
                    safe(&a.outcome),
                    format_ms(a.started),
                    format!("{} ms", a.finished - a.started),
                    cell(&a.worker, 40),
                    a.error.as_deref().map_or(String::new(), |e| cell(e, 100)),
                ]
            })
            .collect();
        out.push_str("attempts\n");
        out.push_str(&table(
            &[
                "RUN", "ATTEMPT", "OUTCOME", "STARTED", "TOOK", "WORKER", "ERROR",
            ],
            &rows,
        ));
    }
    out
}

/// Each line of `text`, made safe, indented by two spaces.
fn indented(text: &str) -> String {
    text.lines()
        .map(|line| format!("  {}\n", safe(line)))
        .collect()
}

/// What `retry`, `cancel` and `delete` do to one request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Action {
    Retry,
    Replay,
    Cancel,
    Delete,
}

impl Action {
    fn past(self) -> &'static str {
        match self {
            Action::Retry => "queued to run again",
            Action::Replay => "queued to run again (replay)",
            Action::Cancel => "cancelled",
            Action::Delete => "deleted",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Replay => "replay",
            Action::Cancel => "cancel",
            Action::Delete => "delete",
        }
    }

    /// Does it; what was done, in words.
    async fn on(self, rt: &Runtime, id: RequestId) -> async_exec::Result<&'static str> {
        match self {
            Action::Retry => rt.retry_now(id).await.map(|()| self.past()),
            Action::Replay => rt.replay(id).await.map(|()| self.past()),
            Action::Cancel => rt.cancel(id).await.map(|done| match done {
                async_exec::CancelOutcome::StopAsked => {
                    "asked to stop (it is running: its body is told within about a second)"
                }
                _ => self.past(),
            }),
            Action::Delete => rt.delete(id).await.map(|()| self.past()),
        }
    }
}

/// `retry`, `cancel`, `delete` on each id in turn; one that fails does not stop the rest.
/// Each is written to the audit trail (as the console's action on one request is: the
/// query naming it, 1 or 0 requests changed), as done by `cli:<os user>`.
pub(crate) async fn act(
    rt: &Runtime,
    action: Action,
    ids: &[RequestId],
) -> Result<Printed, Failure> {
    let actor = crate::operator::actor();
    let mut results = Vec::with_capacity(ids.len());
    let mut human = String::new();
    let mut failures = 0;
    for &id in ids {
        let done = action.on(rt, id).await;
        let target = crate::operator::target_of(id);
        rt.audit_action(&actor, action.name(), &target, u64::from(done.is_ok()))
            .await?;
        match done {
            Ok(what) => {
                human.push_str(&format!("{id}: {what}\n"));
                results.push(json!({ "id": id, "ok": true }));
            }
            Err(error) => {
                failures += 1;
                let message = refusal(rt, action, id, &error);
                human.push_str(&format!("{id}: not {}: {message}\n", action.past()));
                results.push(json!({ "id": id, "ok": false, "error": message }));
            }
        }
    }
    let failed = (failures > 0).then(|| {
        format!(
            "{failures} of {} could not be {}: see above",
            counted(ids.len() as u64, "request"),
            action.past()
        )
    });
    Ok(Printed {
        json: json!({ "action": action.name(), "results": results }),
        human,
        failed,
    })
}

/// `cancel --tag TAG`: every waiting request with the tag, in one action (audited as the
/// console's action on a filter is).
pub(crate) async fn cancel_tagged(rt: &Runtime, tag: &str) -> Result<Printed, Failure> {
    let query = RequestQuery::default().tag(tag);
    let cancelled = rt
        .act(
            async_exec::Action::Cancel,
            &query,
            &crate::operator::actor(),
        )
        .await?;
    Ok(Printed {
        json: json!({ "action": "cancel", "tag": tag, "cancelled": cancelled }),
        human: format!(
            "{} with tag {} cancelled (running ones are not: cancel them by id)\n",
            counted(cancelled, "waiting request"),
            safe(tag)
        ),
        failed: None,
    })
}

/// Why the runtime refused, in the tool's words where they differ from the API's.
fn refusal(rt: &Runtime, action: Action, id: RequestId, error: &Error) -> String {
    match error {
        Error::NotFound(_) => match not_found(rt, id) {
            Failure::Failed(message) => message,
            other => other.to_string(),
        },
        Error::InvalidState { status, .. }
            if status == "success" && matches!(action, Action::Retry) =>
        {
            "it succeeded already; pass --replay to run it again on purpose".into()
        }
        other => crate::failure::explain(other),
    }
}

/// `1 request`, `2 requests`, `3 batches`.
fn counted(n: u64, noun: &str) -> String {
    match (n, noun.ends_with('h')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        _ => format!("{n} {noun}s"),
    }
}

/// `pause EXECUTOR` (`pause` true) and `resume EXECUTOR`, audited as `cli:<os user>`.
pub(crate) async fn pause(rt: &Runtime, executor: &str, pause: bool) -> Result<Printed, Failure> {
    let actor = crate::operator::actor();
    let (json, human) = if pause {
        rt.pause_executor(executor, &actor).await?;
        (
            json!({ "action": "pause", "executor": executor, "paused": true }),
            format!("{}: paused on every instance\n", safe(executor)),
        )
    } else {
        let was = rt.resume_executor(executor, &actor).await?;
        let human = if was {
            format!("{}: resumed\n", safe(executor))
        } else {
            format!("{}: was not paused\n", safe(executor))
        };
        (
            json!({ "action": "resume", "executor": executor, "was_paused": was }),
            human,
        )
    };
    Ok(Printed::ok(json, human))
}

/// `queues`: the queues the services' executors name, and their limits set while running.
pub(crate) async fn queues(rt: &Runtime) -> Result<Printed, Failure> {
    let policies = rt.queue_policies().await?;
    let limit = |n: Option<i64>| n.map_or("code's".to_string(), |n| n.to_string());
    let ms = |n: Option<i64>| {
        n.map_or("code's".to_string(), |n| {
            format!("{:?}", std::time::Duration::from_millis(n.max(0) as u64))
        })
    };
    let rows: Vec<Vec<String>> = policies
        .iter()
        .map(|p| {
            vec![
                safe(&p.queue),
                if p.paused { "paused" } else { "" }.to_string(),
                limit(p.concurrency),
                limit(p.per_instance),
                limit(p.rate),
                limit(p.max_attempts),
                match (p.backoff_base_ms, p.backoff_cap_ms) {
                    (Some(_), Some(_)) => {
                        format!("{}..{}", ms(p.backoff_base_ms), ms(p.backoff_cap_ms))
                    }
                    _ => "code's".to_string(),
                },
                ms(p.timeout_ms),
                p.priority_boost.map_or(String::new(), |b| format!("{b:+}")),
                p.changed_by.as_deref().map_or(String::new(), safe),
            ]
        })
        .collect();
    let human = if rows.is_empty() {
        "no service with queues or policies has started on this database\n".to_string()
    } else {
        crate::render::table(
            &[
                "QUEUE",
                "PAUSED",
                "CONCURRENCY",
                "PER INSTANCE",
                "RATE",
                "ATTEMPTS",
                "BACKOFF",
                "TIMEOUT",
                "BOOST",
                "CHANGED BY",
            ],
            &rows,
        )
    };
    Ok(Printed::ok(json!({ "queues": policies }), human))
}

/// `policy NAME [...]`, audited as `cli:<os user>`.
pub(crate) async fn policy(rt: &Runtime, a: crate::args::PolicyArgs) -> Result<Printed, Failure> {
    let mut change = rt.policy(&a.name).by(crate::operator::actor());
    if a.reset {
        change = change.reset();
    }
    if let Some(paused) = a.paused {
        change = change.paused(paused);
    }
    if let Some(n) = a.concurrency {
        change = change.concurrency(n);
    }
    if let Some(n) = a.per_instance {
        change = change.per_instance(n);
    }
    if let Some(n) = a.rate {
        change = change.rate(n);
    }
    if let Some(n) = a.max_attempts {
        change = change.max_attempts(n);
    }
    if let (Some(base), Some(cap)) = (a.backoff_base, a.backoff_cap) {
        change = change.backoff(base, cap);
    }
    if let Some(timeout) = a.timeout {
        change = change.timeout(timeout);
    }
    if let Some(boost) = a.priority_boost {
        change = change.priority_boost(boost);
    }
    change.apply().await?;
    let now = rt
        .queue_policies()
        .await?
        .into_iter()
        .find(|p| p.queue == a.name);
    Ok(Printed::ok(
        json!({ "policy": now }),
        format!(
            "{}: changed; every instance applies it within about a second (`async-exec queues` shows it)\n",
            safe(&a.name)
        ),
    ))
}

/// `queue-limits QUEUE [--concurrency N] [--per-instance N] [--rate N]`, audited as
/// `cli:<os user>`.
pub(crate) async fn queue_limits(
    rt: &Runtime,
    queue: &str,
    (concurrency, per_instance, rate): (Option<u32>, Option<u32>, Option<u32>),
) -> Result<Printed, Failure> {
    let actor = crate::operator::actor();
    let mut limits = async_exec::QueueLimits::new();
    if let Some(n) = concurrency {
        limits = limits.concurrency(n);
    }
    if let Some(n) = per_instance {
        limits = limits.per_instance(n);
    }
    if let Some(n) = rate {
        limits = limits.rate(n);
    }
    rt.set_queue_limits(queue, limits, &actor).await?;
    let service = |n: Option<u32>| n.map_or("the service's".to_string(), |n| n.to_string());
    let human = match (concurrency, per_instance, rate) {
        (None, None, None) => format!("{}: the service's limits apply again\n", safe(queue)),
        _ => format!(
            "{}: at most {} at once, {} on each instance, {} started a second, from the \
             next claim\n",
            safe(queue),
            service(concurrency),
            service(per_instance),
            service(rate),
        ),
    };
    Ok(Printed::ok(
        json!({ "action": "queue-limits", "queue": queue, "concurrency": concurrency,
                "per_instance": per_instance, "rate": rate }),
        human,
    ))
}

/// `purge`: finished records and orphaned attempt logs, in batches.
pub(crate) async fn purge(rt: &Runtime, a: PurgeArgs) -> Result<Printed, Failure> {
    let report = rt
        .purge(Purge::older_than(a.older_than).dead(a.dead).batch(a.batch))
        .await?;
    let target = json!({ "older_than_ms": a.older_than.as_millis() as u64, "dead": a.dead });
    rt.audit_action(
        &crate::operator::actor(),
        "purge",
        &target.to_string(),
        report.requests,
    )
    .await?;
    let statuses: Vec<&str> = Purge::older_than(a.older_than)
        .dead(a.dead)
        .statuses()
        .iter()
        .map(|s| s.as_str())
        .collect();
    let human = format!(
        "purged {} ({}) and {} older than {}, in {}{}\n",
        counted(report.requests, "request"),
        statuses.join(", "),
        counted(report.attempt_logs, "attempt log"),
        crate::time::format_age(a.older_than),
        counted(report.batches, "batch"),
        if a.dead {
            ""
        } else {
            "; dead requests kept (pass --dead to purge them too)"
        }
    );
    Ok(Printed::ok(
        json!({
            "requests": report.requests,
            "attempt_logs": report.attempt_logs,
            "batches": report.batches,
            "statuses": statuses,
            "older_than_ms": a.older_than.as_millis() as u64,
        }),
        human,
    ))
}

/// `40 of 120 (33%)`.
fn progress_text(p: async_exec::Progress) -> String {
    match (p.done, p.total) {
        (_, 0) => format!("{} of 0", p.done),
        (done, total) => format!("{done} of {total} ({}%)", done.saturating_mul(100) / total),
    }
}
