//! The pages of the fleet: executors (registered and seen, with counts, durations,
//! pauses and the instances that know them), instances, and the audit trail. The views
//! are shared with the JSON API.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State as Shared};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use serde::Serialize;

use super::auth::PageWho;
use super::filter::urlencode;
use super::pages::{error_page, page, NoticeParams};
use super::views::{can_act, csrf_field, layout, notice, span, time_el};
use super::State;
use crate::base::record::Status;

/// Attempts read for an executor's duration percentiles.
const DURATION_SAMPLE: i64 = 1000;

/// An executor as the console shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct ExecutorView {
    /// Its stable name.
    pub(crate) name: String,
    /// Whether this binary links it.
    pub(crate) registered: bool,
    /// Its sign in this binary.
    pub(crate) sign: Option<String>,
    /// Its persisted parameters in this binary.
    pub(crate) signature: Option<String>,
    pub(crate) remark: Option<String>,
    pub(crate) strategy: Option<String>,
    /// Attempts before `dead` (this binary's default for it).
    pub(crate) max_attempts: Option<u32>,
    /// Timeout of one attempt (ms).
    pub(crate) timeout_ms: Option<u64>,
    /// Requests by status.
    pub(crate) counts: BTreeMap<String, i64>,
    /// Median duration of the logged attempts of kept requests (ms).
    pub(crate) p50_ms: Option<i64>,
    /// 95th percentile of the same (ms).
    pub(crate) p95_ms: Option<i64>,
    /// How many attempts the percentiles are of.
    pub(crate) sampled: usize,
    /// Live instances that link it, with their sign of it.
    pub(crate) instances: Vec<InstanceSign>,
    /// Its schedule (`every`, `cron`) in this build, if it calls itself.
    pub(crate) schedule: Option<String>,
    /// Its next ticks (unix ms), for a scheduled executor.
    pub(crate) next_ticks: Vec<i64>,
    /// Who paused its claims, if paused.
    pub(crate) paused_by: Option<String>,
    /// When (unix ms).
    pub(crate) paused_at: Option<i64>,
}

/// An instance's sign of an executor.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct InstanceSign {
    pub(crate) instance: String,
    pub(crate) sign: String,
}

/// An executor's name and sign, as an instance links it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct SignView {
    pub(crate) name: String,
    pub(crate) sign: String,
}

/// An instance as the console shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct InstanceView {
    pub(crate) name: String,
    pub(crate) application: String,
    pub(crate) workers: bool,
    /// Started (unix ms, the database's clock).
    pub(crate) started: i64,
    /// Last heartbeat (unix ms, the database's clock).
    pub(crate) last_seen: i64,
    /// Executors it links, with their signs.
    pub(crate) executors: Vec<SignView>,
    /// Requests it holds `running` now.
    pub(crate) running: i64,
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[i64], pct: usize) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[(sorted.len() - 1) * pct / 100])
}

pub(crate) async fn executor_views(state: &State) -> crate::Result<Vec<ExecutorView>> {
    let rt = &state.rt;
    let counts = state.counts.get(rt).await?;
    let instances = rt.instances().await?;
    let paused = rt.paused().await?;
    let mut views: BTreeMap<String, ExecutorView> = BTreeMap::new();
    let blank = |name: &str| ExecutorView {
        name: name.to_string(),
        registered: false,
        sign: None,
        signature: None,
        remark: None,
        strategy: None,
        max_attempts: None,
        timeout_ms: None,
        counts: BTreeMap::new(),
        p50_ms: None,
        p95_ms: None,
        sampled: 0,
        instances: Vec::new(),
        schedule: None,
        next_ticks: Vec::new(),
        paused_by: None,
        paused_at: None,
    };
    for info in rt.executor_infos() {
        let mut view = blank(&info.name);
        view.registered = true;
        view.sign = Some(info.sign);
        view.signature = Some(info.signature);
        view.remark = Some(info.remark);
        view.strategy = Some(info.strategy);
        view.max_attempts = Some(info.max_attempts);
        view.timeout_ms = Some(info.timeout_ms);
        view.schedule = info.schedule;
        view.next_ticks = info.next_ticks;
        views.insert(info.name, view);
    }
    for c in &counts.by_executor {
        let view = views
            .entry(c.executor.clone())
            .or_insert_with(|| blank(&c.executor));
        view.counts.insert(c.status.as_str().to_string(), c.count);
    }
    for instance in &instances {
        for e in &instance.executors {
            let view = views
                .entry(e.name.clone())
                .or_insert_with(|| blank(&e.name));
            view.instances.push(InstanceSign {
                instance: instance.name.clone(),
                sign: e.sign.clone(),
            });
        }
    }
    for p in paused {
        let view = views
            .entry(p.executor.clone())
            .or_insert_with(|| blank(&p.executor));
        view.paused_by = Some(p.paused_by);
        view.paused_at = Some(p.paused_at);
    }
    for view in views.values_mut() {
        let mut durations = rt.attempt_durations(&view.name, DURATION_SAMPLE).await?;
        durations.sort_unstable();
        view.sampled = durations.len();
        view.p50_ms = percentile(&durations, 50);
        view.p95_ms = percentile(&durations, 95);
    }
    Ok(views.into_values().collect())
}

pub(crate) async fn instance_views(state: &State) -> crate::Result<Vec<InstanceView>> {
    let rt = &state.rt;
    let running = rt.running_by_instance().await?;
    Ok(rt
        .instances()
        .await?
        .into_iter()
        .map(|i| InstanceView {
            running: running
                .iter()
                .find(|(owner, _)| *owner == i.name)
                .map_or(0, |(_, n)| *n),
            executors: i
                .executors
                .into_iter()
                .map(|e| SignView {
                    name: e.name,
                    sign: e.sign,
                })
                .collect(),
            name: i.name,
            application: i.application,
            workers: i.workers,
            started: i.started,
            last_seen: i.last_seen,
        })
        .collect())
}

/// Executors: registered in this build and seen in the table.
pub(crate) async fn executors(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Query(params): Query<NoticeParams>,
) -> Response {
    let views = match executor_views(&state).await {
        Ok(views) => views,
        Err(error) => {
            let refused = super::reads::Refused::from(error);
            return error_page(&base, &who, refused.status, &refused.message);
        }
    };
    let body = html! {
        (notice(params.text().as_deref(), None))
        table id="executors" {
            thead { tr {
                th { "executor" } th { "in this build" } th { "defaults" }
                @for status in Status::ALL { th.num { (status.as_str()) } }
                th.num { "p50" } th.num { "p95" } th { "instances" } th { "claims" }
            } }
            tbody {
                @for v in &views {
                    tr data-executor=(v.name) data-paused=(v.paused_by.is_some()) {
                        td {
                            a href={ (base) "/requests?executor=" (urlencode(&v.name)) } { (v.name) }
                            @if let Some(remark) = v.remark.as_deref().filter(|r| !r.is_empty()) { div.remark { (remark) } }
                        }
                        td {
                            @if let (Some(sign), Some(signature)) = (&v.sign, &v.signature) {
                                code title=(signature) { (sign) } div.signature { "(" (signature) ")" }
                            } @else { "no" }
                        }
                        td {
                            @if let (Some(strategy), Some(max), Some(timeout)) = (&v.strategy, v.max_attempts, v.timeout_ms) {
                                (strategy) ", " (max) " attempts, " (span(timeout as i64)) " timeout"
                            }
                            @if let Some(schedule) = &v.schedule {
                                div.schedule {
                                    (schedule)
                                    @if let Some(next) = v.next_ticks.first() { ", next " (time_el(*next)) }
                                }
                            }
                        }
                        @for status in Status::ALL {
                            td.num { (v.counts.get(status.as_str()).copied().unwrap_or(0)) }
                        }
                        td.num { (v.p50_ms.map(span).unwrap_or_else(|| "—".into())) }
                        td.num { (v.p95_ms.map(span).unwrap_or_else(|| "—".into())) }
                        td { @for i in &v.instances { div { (i.instance) " " code { (i.sign) } } } }
                        td {
                            @if let Some(by) = &v.paused_by {
                                span.badge.dead { "paused" } " by " (by) " " (time_el(v.paused_at.unwrap_or(0)))
                            } @else { "running" }
                            @if can_act(&who) {
                                @let (verb, label) = if v.paused_by.is_some() { ("resume", "Resume") } else { ("pause", "Pause") };
                                form.inline method="post" action={ (base) "/executors/" (verb) } {
                                    (csrf_field(&who))
                                    input type="hidden" name="executor" value=(v.name);
                                    button.pause-button type="submit" data-executor=(v.name) { (label) }
                                }
                            }
                        }
                    }
                }
            }
        }
        p.hint { "Durations are of logged attempts (failures; successes with `log_success`) of requests still kept, the last " (DURATION_SAMPLE) " at most." }
    };
    page(StatusCode::OK, layout(&base, Some(&who), "Executors", body))
}

/// Instances: those alive, with their executors and what each holds now.
pub(crate) async fn instances(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
) -> Response {
    let views = match instance_views(&state).await {
        Ok(views) => views,
        Err(error) => {
            let refused = super::reads::Refused::from(error);
            return error_page(&base, &who, refused.status, &refused.message);
        }
    };
    let body = html! {
        (super::views::refreshing(10))
        table id="instances" {
            thead { tr { th { "instance" } th { "application" } th { "workers" } th { "started" } th { "last heartbeat" } th.num { "running now" } th { "executors" } } }
            tbody {
                @for i in &views {
                    tr data-instance=(i.name) {
                        td { (i.name) }
                        td { (i.application) }
                        td { (if i.workers { "yes" } else { "submit only" }) }
                        td { (time_el(i.started)) }
                        td { (time_el(i.last_seen)) }
                        td.num { (i.running) }
                        td { @for e in &i.executors { div { (e.name) " " code { (e.sign) } } } }
                    }
                }
            }
        }
        @if views.is_empty() { p { "No instance has announced itself within a lease." } }
    };
    page(StatusCode::OK, layout(&base, Some(&who), "Instances", body))
}

/// The audit trail: the last 200 actions.
pub(crate) async fn audit(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
) -> Response {
    let entries = match state.rt.audit_trail(200).await {
        Ok(entries) => entries,
        Err(error) => {
            let refused = super::reads::Refused::from(error);
            return error_page(&base, &who, refused.status, &refused.message);
        }
    };
    let body = html! {
        table id="audit" {
            thead { tr { th { "when" } th { "who" } th { "action" } th { "on" } th.num { "changed" } } }
            tbody {
                @for e in &entries {
                    tr data-audit-id=(e.id) data-action=(e.action) {
                        td { (time_el(e.create_time)) }
                        td { (e.actor) }
                        td { (e.action) }
                        td { code { (e.target) } }
                        td.num { (e.affected) }
                    }
                }
            }
        }
        @if entries.is_empty() { p.empty id="no-audit" { "No operator action yet: retries, cancels, deletes, replays and pauses are listed here." } }
    };
    page(
        StatusCode::OK,
        layout(&base, Some(&who), "Audit trail", body),
    )
}
