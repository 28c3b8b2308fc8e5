//! The flow page of a queue (`/queues/{name}/flow`): its limits in force, what runs and
//! waits per partition with each one's own settings, and for operators a form per
//! partition to set (weight, concurrency, rate) or clear them on every instance, audited
//! as `rt.set_partition` / `rt.clear_partition` are. Partition names are any text: maud
//! escapes them in the page, forms carry them as values.

use std::sync::Arc;

use axum::extract::{Form, Path, Query, State as Shared};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::actions::may_act;
use super::auth::{PageWho, Who};
use super::filter::urlencode;
use super::pages::{error_page, page, NoticeParams};
use super::reads::Refused;
use super::views::{can_act, csrf_field, layout, notice, time_el};
use super::State;
use crate::base::partition::PartitionSettings;

fn refused(base: &str, who: &Who, error: crate::Error) -> Response {
    let refused = Refused::from(error);
    error_page(base, who, refused.status, &refused.message)
}

/// The flow page of a queue.
pub(crate) async fn flow_page(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
    Query(params): Query<NoticeParams>,
) -> Response {
    if let Err(error) = state.rt.known_queue(&name).await {
        return refused(&base, &who, error);
    }
    let flow = match state.rt.queue_flow(&name, 100).await {
        Ok(flow) => flow,
        Err(error) => return refused(&base, &who, error),
    };
    let limit = |n: Option<i64>| n.map_or("none".to_string(), |n| n.to_string());
    let body = html! {
        (notice(params.text().as_deref(), None))
        p {
            (flow.running) " running, " (flow.waiting) " waiting; concurrency " (limit(flow.concurrency))
            ", per instance " (limit(flow.per_instance)) ", per partition " (limit(flow.per_partition))
            ", rate " (limit(flow.rate)) " per " (flow.rate_period_ms) " ms"
        }
        p.hint {
            "A partition's own settings: its weight in the queue's turns (records per turn), its "
            "concurrency (in place of the queue's per partition), its rate (e.g. 600/minute). "
            "Empty fields are the queue's. From code: " code { "rt.set_partition(..)" }
            "; from the CLI: " code { "async-exec partition QUEUE PARTITION ..." } "."
        }
        table id="partitions" {
            thead { tr {
                th { "partition" } th.num { "running" } th.num { "waiting" } th { "oldest due" }
                th { "" } th { "own settings" }
            } }
            tbody {
                @for p in &flow.partitions {
                    tr data-partition=(p.partition) {
                        td { @if p.partition.is_empty() { span.hint { "(none)" } } @else { (p.partition) } }
                        td.num { (p.running) }
                        td.num { (p.waiting) }
                        td { @if let Some(at) = p.oldest_due { (time_el(at)) } }
                        td { @if p.at_limit { span.badge { "at limit" } } }
                        td { (describe(p.settings.as_ref())) }
                    }
                    @if can_act(&who) && !p.partition.is_empty() {
                        tr.partition-form { td colspan="6" {
                            (form(&base, &who, &flow.queue, &p.partition, p.settings.as_ref()))
                        } }
                    }
                }
            }
        }
        @if can_act(&who) {
            h2 { "Another partition" }
            (form(&base, &who, &flow.queue, "", None))
        }
    };
    page(
        StatusCode::OK,
        layout(&base, Some(&who), &format!("Flow of {}", flow.queue), body),
    )
}

/// A partition's own settings in words (empty: the queue's).
fn describe(settings: Option<&PartitionSettings>) -> String {
    let Some(s) = settings else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(w) = s.weight_value() {
        parts.push(format!("weight {w}"));
    }
    if let Some(n) = s.concurrency_limit() {
        parts.push(format!("{n} at once"));
    }
    if let Some(r) = s.rate_limit() {
        parts.push(rate_text(r));
    }
    parts.join(", ")
}

fn rate_text(rate: crate::Rate) -> String {
    format!("{}/{:?}", rate.starts(), rate.period()).to_lowercase()
}

/// A partition's form, filled with its settings; `partition` empty: a field for it.
fn form(
    base: &str,
    who: &Who,
    queue: &str,
    partition: &str,
    settings: Option<&PartitionSettings>,
) -> Markup {
    let n = |v: Option<u32>| v.map_or(String::new(), |n| n.to_string());
    let s = settings.copied().unwrap_or_default();
    html! {
        form.partition method="post" action={ (base) "/queues/" (urlencode(queue)) "/partitions" } {
            (csrf_field(who))
            @if partition.is_empty() {
                label { "partition " input type="text" name="partition" required; }
            } @else {
                input type="hidden" name="partition" value=(partition);
            }
            label { "weight " input type="text" name="weight" size="5" value=(n(s.weight_value())); }
            label { "concurrency " input type="text" name="concurrency" size="5" value=(n(s.concurrency_limit())); }
            label { "rate " input type="text" name="rate" size="10" placeholder="600/minute"
                value=(s.rate_limit().map(rate_text).unwrap_or_default()); }
            button type="submit" name="do" value="set" { "Apply" }
            @if settings.is_some() {
                button type="submit" name="do" value="clear" { "Clear" }
            }
        }
    }
}

/// The partition form's fields: text, as typed.
#[derive(Debug, Deserialize)]
pub(crate) struct PartitionForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    partition: String,
    #[serde(default)]
    weight: String,
    #[serde(default)]
    concurrency: String,
    #[serde(default)]
    rate: String,
    #[serde(default)]
    r#do: String,
}

/// A whole number field: empty is `None`.
fn number(field: &str, text: &str) -> Result<Option<u32>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| format!("{field}: {text:?} is not a whole number from 1"))
}

/// A rate field (`600/minute`; second, minute, hour, day): empty is `None`.
fn rate(text: &str) -> Result<Option<crate::Rate>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let wrong = || format!("rate: {text:?} is not N/second, N/minute, N/hour or N/day");
    let (n, period) = text.split_once('/').ok_or_else(wrong)?;
    let n: u32 = n.trim().parse().map_err(|_| wrong())?;
    let period = match period.trim() {
        "s" | "second" => crate::Period::Second,
        "m" | "minute" => crate::Period::Minute,
        "h" | "hour" => crate::Period::Hour,
        "d" | "day" => crate::Period::Day,
        _ => return Err(wrong()),
    };
    Ok(Some(crate::Rate::new(n, period)))
}

/// Applies a partition form: its settings become what the form says, or are cleared.
pub(crate) async fn apply(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
    Form(form): Form<PartitionForm>,
) -> Response {
    if let Some(refused) = may_act(&base, &who, form.csrf.as_deref()) {
        return refused;
    }
    let done = if form.r#do == "clear" {
        state
            .rt
            .clear_partition(&name, &form.partition, &who.name)
            .await
            .map(|_| ())
    } else {
        let settings = || -> Result<PartitionSettings, String> {
            let mut s = PartitionSettings::new();
            if let Some(w) = number("weight", &form.weight)? {
                s = s.weight(w);
            }
            if let Some(c) = number("concurrency", &form.concurrency)? {
                s = s.concurrency(c);
            }
            if let Some(r) = rate(&form.rate)? {
                s = s.rate(r);
            }
            Ok(s)
        };
        let settings = match settings() {
            Ok(settings) => settings,
            Err(message) => {
                return error_page(&base, &who, StatusCode::UNPROCESSABLE_ENTITY, &message)
            }
        };
        state
            .rt
            .set_partition(&name, &form.partition, settings, &who.name)
            .await
    };
    if let Err(error) = done {
        return refused(&base, &who, error);
    }
    Redirect::to(&format!(
        "{base}/queues/{}/flow?notice=partition",
        urlencode(&name)
    ))
    .into_response()
}
