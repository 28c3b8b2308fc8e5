//! The commands that read: `stats`, `list` and `show` (and the applications a database holds).

use async_exec::{AttemptLog, Order, PageSpec, Request, RequestId, RequestQuery, Runtime, Status};
use serde_json::{json, Value};

use crate::args::ListArgs;
use crate::failure::Failure;
use crate::render::{cell, safe, table};
use crate::time::format_ms;

use super::{not_found, Printed};

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

/// `40 of 120 (33%)`.
fn progress_text(p: async_exec::Progress) -> String {
    match (p.done, p.total) {
        (_, 0) => format!("{} of 0", p.done),
        (done, total) => format!("{done} of {total} ({}%)", done.saturating_mul(100) / total),
    }
}
