//! The policies page: every queue's (and overridden executor's) policy as stored, and a
//! form per row for operators to change it on every instance (audited as `policy`), the
//! same change as `rt.policy(..)` and `async-exec policy`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Form, Query, State as Shared};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::actions::may_act;
use super::auth::{PageWho, Who};
use super::filter::urlencode;
use super::pages::{error_page, page, NoticeParams};
use super::reads::Refused;
use super::views::{can_act, csrf_field, layout, notice, span, time_el};
use super::State;
use crate::base::query::QueuePolicy;

/// The policies page.
pub(crate) async fn policies(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Query(params): Query<NoticeParams>,
) -> Response {
    let (rows, counts) = match (
        state.rt.queue_policies().await,
        state.rt.counts_by_executor().await,
    ) {
        (Ok(rows), Ok(counts)) => (rows, counts),
        (Err(error), _) | (_, Err(error)) => {
            let refused = Refused::from(error);
            return error_page(&base, &who, refused.status, &refused.message);
        }
    };
    let load = super::reads::queue_load(&state, &counts);
    let body = html! {
        (super::views::refreshing(10))
        (notice(params.text().as_deref(), None))
        p.hint {
            "A policy overrides what the code says, for a queue (every executor in it) or an "
            "executor in no queue; an empty field keeps the code's. Every instance applies a "
            "change within about a second. From code: " code { "rt.policy(name)" } "; from the "
            "CLI: " code { "async-exec policy NAME ..." } "."
        }
        table id="policies" {
            thead { tr {
                th { "queue / executor" } th { "state" } th.num { "running" } th.num { "waiting" }
                th.num { "concurrency" }
                th.num { "per instance" } th.num { "rate /s" } th.num { "attempts" }
                th { "backoff" } th { "timeout" } th.num { "boost" } th { "changed" }
            } }
            tbody {
                @for p in &rows {
                    tr data-policy=(p.queue) data-paused=(p.paused) {
                        td {
                            a href={ (base) "/requests?executor=" (urlencode(&p.queue)) } { (p.queue) }
                            " " a.flow href={ (base) "/queues/" (urlencode(&p.queue)) "/flow" } { "flow" }
                        }
                        td { @if p.paused { span.badge.dead { "paused" } } @else { "running" } }
                        @let (running, waiting) = load.get(&p.queue).copied().unwrap_or_default();
                        td.num.running { (running) }
                        td.num.waiting { (waiting) }
                        td.num { (or_code(p.concurrency.map(|n| n.to_string()))) }
                        td.num { (or_code(p.per_instance.map(|n| n.to_string()))) }
                        td.num { (or_code(p.rate.map(|n| n.to_string()))) }
                        td.num { (or_code(p.max_attempts.map(|n| n.to_string()))) }
                        td { (or_code(match (p.backoff_base_ms, p.backoff_cap_ms) {
                            (Some(base), Some(cap)) => Some(format!("{} to {}", span(base), span(cap))),
                            _ => None,
                        })) }
                        td { (or_code(p.timeout_ms.map(span))) }
                        td.num { (p.priority_boost.map_or(String::new(), |b| format!("{b:+}"))) }
                        td { @if let (Some(by), Some(at)) = (&p.changed_by, p.changed_at) { (by) " " (time_el(at)) } }
                    }
                    @if can_act(&who) {
                        tr.policy-form { td colspan="12" { (form(&base, &who, p)) } }
                    }
                }
            }
        }
        @if rows.is_empty() {
            p { "No queue has a row yet: a service whose executors name a queue makes one at start." }
        }
        @if can_act(&who) {
            h2 { "An executor in no queue" }
            (form(&base, &who, &QueuePolicy {
                queue: String::new(),
                concurrency: None,
                per_instance: None,
                rate: None,
                paused: false,
                max_attempts: None,
                backoff_base_ms: None,
                backoff_cap_ms: None,
                timeout_ms: None,
                priority_boost: None,
                changed_by: None,
                changed_at: None,
            }))
        }
    };
    page(
        StatusCode::OK,
        layout(&base, Some(&who), "Queues and policies", body),
    )
}

fn or_code(value: Option<String>) -> Markup {
    html! { @match value { Some(v) => (v), None => span.hint { "code's" } } }
}

/// A policy's form, filled with what is stored: it sets every field (an empty one back
/// to the code's).
fn form(base: &str, who: &Who, p: &QueuePolicy) -> Markup {
    let ms = |v: Option<i64>| v.map_or(String::new(), |ms| format!("{ms}ms"));
    let n = |v: Option<i64>| v.map_or(String::new(), |n| n.to_string());
    html! {
        form.policy method="post" action={ (base) "/policies" } data-policy=(p.queue) {
            (csrf_field(who))
            @if p.queue.is_empty() {
                label { "executor " input type="text" name="name" required; }
            } @else {
                input type="hidden" name="name" value=(p.queue);
            }
            label { input type="checkbox" name="paused" value="true" checked[p.paused]; " paused" }
            label { "concurrency " input type="text" name="concurrency" size="5" value=(n(p.concurrency)); }
            label { "per instance " input type="text" name="per_instance" size="5" value=(n(p.per_instance)); }
            label { "rate " input type="text" name="rate" size="5" value=(n(p.rate)); }
            label { "attempts " input type="text" name="max_attempts" size="5" value=(n(p.max_attempts)); }
            label { "backoff " input type="text" name="backoff_base" size="7" placeholder="1s" value=(ms(p.backoff_base_ms)); }
            label { " to " input type="text" name="backoff_cap" size="7" placeholder="10m" value=(ms(p.backoff_cap_ms)); }
            label { "timeout " input type="text" name="timeout" size="7" placeholder="30s" value=(ms(p.timeout_ms)); }
            label { "boost " input type="text" name="priority_boost" size="5" value=(n(p.priority_boost)); }
            button type="submit" { "Apply" }
        }
    }
}

/// The policy form's fields: text, as typed.
#[derive(Debug, Deserialize)]
pub(crate) struct PolicyForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    paused: Option<String>,
    #[serde(default)]
    concurrency: String,
    #[serde(default)]
    per_instance: String,
    #[serde(default)]
    rate: String,
    #[serde(default)]
    max_attempts: String,
    #[serde(default)]
    backoff_base: String,
    #[serde(default)]
    backoff_cap: String,
    #[serde(default)]
    timeout: String,
    #[serde(default)]
    priority_boost: String,
}

/// A whole number field: empty is `None`.
fn number<T: std::str::FromStr>(field: &str, text: &str) -> Result<Option<T>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| format!("{field}: `{text}` is not a whole number in range"))
}

/// A duration field (`500ms`, `30s`, `5m`): empty is `None`.
fn duration(field: &str, text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    humantime::parse_duration(text)
        .map(Some)
        .map_err(|_| format!("{field}: `{text}` is not a duration; write e.g. 500ms, 30s, 5m"))
}

/// Applies a policy form: the policy becomes what the form says (audited as `policy`).
pub(crate) async fn apply(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Form(form): Form<PolicyForm>,
) -> Response {
    if let Some(refused) = may_act(&base, &who, form.csrf.as_deref()) {
        return refused;
    }
    let name = form.name.trim().to_string();
    let change = || -> Result<crate::PolicyChange<'_>, String> {
        let mut change = state.rt.policy(name.clone()).reset().by(who.name.clone());
        change = change.paused(form.paused.as_deref() == Some("true"));
        if let Some(n) = number("concurrency", &form.concurrency)? {
            change = change.concurrency(n);
        }
        if let Some(n) = number("per instance", &form.per_instance)? {
            change = change.per_instance(n);
        }
        if let Some(n) = number("rate", &form.rate)? {
            change = change.rate(n);
        }
        if let Some(n) = number("attempts", &form.max_attempts)? {
            change = change.max_attempts(n);
        }
        match (
            duration("backoff", &form.backoff_base)?,
            duration("backoff cap", &form.backoff_cap)?,
        ) {
            (Some(base), Some(cap)) => change = change.backoff(base, cap),
            (None, None) => {}
            _ => return Err("backoff: give both its first delay and its cap, or neither".into()),
        }
        if let Some(timeout) = duration("timeout", &form.timeout)? {
            change = change.timeout(timeout);
        }
        if let Some(boost) = number("boost", &form.priority_boost)? {
            change = change.priority_boost(boost);
        }
        Ok(change)
    };
    let change = match change() {
        Ok(change) => change,
        Err(message) => return error_page(&base, &who, StatusCode::UNPROCESSABLE_ENTITY, &message),
    };
    if let Err(error) = change.apply().await {
        let refused = Refused::from(error);
        return error_page(&base, &who, refused.status, &refused.message);
    }
    Redirect::to(&format!(
        "{base}/policies?notice=policy&name={}",
        urlencode(&name)
    ))
    .into_response()
}
