//! The pages of the queues: every queue with its verdict (stuck ones first), and a
//! queue's page with its limits in force, what runs, waits and starts, its partitions and
//! its saturation history. The JSON API (`console/flow.rs`) serves the same reads.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State as Shared};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::auth::PageWho;
use super::filter::urlencode;
use super::pages::{error_page, page};
use super::views::{layout, refreshing, span};
use super::State;
use crate::base::flow::Verdict;
use crate::operate::flow_view::urgency;

/// How far back a queue's page draws its history.
const HISTORY_SPAN: Duration = Duration::from_secs(3600);

/// Partitions a queue's page lists.
const PARTITIONS_SHOWN: usize = 50;

fn refused(base: &str, who: &super::auth::Who, error: crate::Error) -> Response {
    let refused = super::reads::Refused::from(error);
    error_page(base, who, refused.status, &refused.message)
}

fn verdict_el(verdict: Verdict) -> Markup {
    html! { span class={ "verdict verdict-" (verdict.as_str()) } { (verdict.as_str().replace('_', " ")) } }
}

fn limit(n: Option<i64>) -> Markup {
    html! { @if let Some(n) = n { (n) } @else { "—" } }
}

fn lag(ms: Option<i64>) -> Markup {
    html! { @if let Some(ms) = ms { (span(ms)) } @else { "—" } }
}

/// Every queue, the ones to look at first (stuck, backlogged) on top.
pub(crate) async fn queues(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
) -> Response {
    let mut queues = match state.rt.queues_flow().await {
        Ok(queues) => queues,
        Err(error) => return refused(&base, &who, error),
    };
    queues.sort_by(|a, b| (urgency(a.verdict), &a.queue).cmp(&(urgency(b.verdict), &b.queue)));
    let body = html! {
        (refreshing(10))
        p { "Limit working: running at a limit while due requests wait. Stuck: due requests wait, the queue runs below its limits and nothing started in the last minute (or it is paused)." }
        table id="queues" {
            thead { tr { th { "queue" } th { "verdict" } th.num { "running" } th.num { "limit" } th.num { "due" } th.num { "waiting" } th.num { "lag" } th.num { "started (1-2 min)" } th { "why" } } }
            tbody {
                @for q in &queues {
                    tr data-queue=(q.queue) data-verdict=(q.verdict.as_str()) {
                        td { a href={ (base) "/queues/" (urlencode(&q.queue)) } { (q.queue) } }
                        td { (verdict_el(q.verdict)) }
                        td.num { (q.running) }
                        td.num { (limit(q.concurrency)) }
                        td.num { (q.due) }
                        td.num { (q.waiting) }
                        td.num { (lag(q.lag_ms)) }
                        td.num { (q.started) }
                        td { (q.reason) }
                    }
                }
            }
        }
        @if queues.is_empty() { p.empty id="no-queues" { "No queue yet: executors name one with #[async_exec(queue = \"..\")]." } }
    };
    page(StatusCode::OK, layout(&base, Some(&who), "Queues", body))
}

/// A queue: its verdict, limits, counts, partitions and saturation history.
pub(crate) async fn queue(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Path(name): Path<String>,
) -> Response {
    match state.rt.is_queue(&name).await {
        Ok(true) => {}
        Ok(false) => {
            let message = format!(
                "No queue of this application is named {:?}: the queues page lists them.",
                crate::base::text::capped(&name, 100)
            );
            return error_page(&base, &who, StatusCode::NOT_FOUND, &message);
        }
        Err(error) => return refused(&base, &who, error),
    }
    let flow = match state.rt.queue_flow(&name, PARTITIONS_SHOWN).await {
        Ok(flow) => flow,
        Err(error) => return refused(&base, &who, error),
    };
    let history = match state.rt.flow_history(&name, HISTORY_SPAN).await {
        Ok(history) => history,
        Err(error) => return refused(&base, &who, error),
    };
    let now = state.rt.inner.now_ms();
    let since = now - HISTORY_SPAN.as_millis() as i64;
    let title = format!("Queue {}", flow.queue);
    let body = html! {
        (refreshing(10))
        p id="verdict" data-verdict=(flow.verdict.as_str()) { (verdict_el(flow.verdict)) ": " (flow.reason) }
        table id="flow" {
            tbody {
                tr { th { "running" } td id="running" { (flow.running) } th { "limit (all instances)" } td { (limit(flow.concurrency)) } }
                tr { th { "due" } td id="due" { (flow.due) } th { "per instance" } td { (limit(flow.per_instance)) } }
                tr { th { "waiting" } td id="waiting" { (flow.waiting) } th { "per partition" } td { (limit(flow.per_partition)) } }
                tr { th { "lag (oldest due)" } td id="lag" { (lag(flow.lag_ms)) } th { "rate (starts/s)" } td { (limit(flow.rate)) } }
                tr { th { "started" } td id="started" { (flow.started) " in " (span(flow.rate_window_ms)) } th { "finished" } td { (flow.finished) " in " (span(flow.rate_window_ms)) } }
                tr { th { "paused" } td { @if flow.paused { "yes" } @else { "no" } } th {} td {} }
            }
        }
        (super::charts::flow_line("flow-history", &history, since, now))
        h2 { "Partitions (the most waiting first)" }
        table id="partitions" {
            thead { tr { th { "partition" } th.num { "running" } th.num { "limit" } th.num { "waiting" } th.num { "lag" } th { "at its limit" } } }
            tbody {
                @for p in &flow.partitions {
                    tr data-partition=(p.partition) {
                        td { @if p.partition.is_empty() { em { "(none)" } } @else { (p.partition) } }
                        td.num { (p.running) }
                        td.num { (limit(p.limit)) }
                        td.num { (p.waiting) }
                        td.num { (lag(p.lag_ms)) }
                        td { @if p.at_limit { "yes" } @else { "no" } }
                    }
                }
            }
        }
        @if flow.partitions.is_empty() { p.empty { "Nothing runs or waits in this queue." } }
        p { a href={ (base) "/queues" } { "All queues" } }
    };
    page(StatusCode::OK, layout(&base, Some(&who), &title, body))
}
