//! The console's pages: overview, requests, request detail, executors, instances, audit.
//! Forms and the actions they post are in [`super::actions`].

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, RawQuery, State as Shared};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::auth::{PageWho, Who};
use super::charts;
use super::filter::{urlencode, FilterForm, PageForm};
use super::views::{
    action_label, badge, can_act, csrf_field, layout, notice, span, time_el, visible,
};
use super::State;
use crate::base::query::{Action, Order};
use crate::base::record::Status;
use crate::store::ops::minute_of;

/// What every page is sent with: no framing (clickjacking), scripts, styles, forms and
/// images from the console only, nothing cached (the pages show live records).
const PAGE_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
];

/// A rendered page with its status.
pub(crate) fn page(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, Html(markup.into_string())).into_response();
    for (name, value) in PAGE_HEADERS {
        response.headers_mut().insert(
            axum::http::HeaderName::from_static(name),
            axum::http::HeaderValue::from_static(value),
        );
    }
    response
}

/// A page that says what went wrong.
pub(crate) fn error_page(base: &str, who: &Who, status: StatusCode, message: &str) -> Response {
    let body = html! { p.error id="error" { (message) } p { a href=(super::views::home(base)) { "Back to the overview" } } };
    page(
        status,
        layout(
            base,
            Some(who),
            status.canonical_reason().unwrap_or("Error"),
            body,
        ),
    )
}

fn failed(base: &str, who: &Who, error: crate::Error) -> Response {
    let refused = super::reads::Refused::from(error);
    error_page(base, who, refused.status, &refused.message)
}

pub(crate) use super::views::NoticeParams;

/// Overview: counts by status and executor, the oldest waiting request, the failure rate,
/// and the charts.
pub(crate) async fn overview(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
) -> Response {
    match overview_body(&state, &base).await {
        Ok(body) => page(StatusCode::OK, layout(&base, Some(&who), "Overview", body)),
        Err(error) => failed(&base, &who, error),
    }
}

async fn overview_body(state: &State, base: &str) -> crate::Result<Markup> {
    let o = super::overview::overview(state).await?;
    let now = crate::base::record::now_ms();
    let now_minute = minute_of(now);
    let hour = charts::bucketed(&o.finished_per_minute, now_minute, 60_000, 60);
    let quarter_hours = charts::bucketed(&o.finished_per_minute, now_minute, 15 * 60_000, 96);
    let rate = match o.failure_rate_last_hour {
        None => "—".to_string(),
        Some(rate) => format!("{:.1} %", 100.0 * rate),
    };
    let mut executors: BTreeMap<&str, BTreeMap<&str, i64>> = BTreeMap::new();
    for c in &o.by_executor {
        executors
            .entry(c.executor.as_str())
            .or_default()
            .insert(c.status.as_str(), c.count);
    }
    let depth = &o.queue_depth;
    // The queues (and policies): paused or not, running and waiting, their limit.
    let policies = state.rt.queue_policies().await?;
    let load = super::reads::queue_load(state, &o.by_executor);
    Ok(html! {
        (super::views::refreshing(10))
        section.cards {
            @for c in &o.by_status {
                div.card id={ "count-" (c.status.as_str()) } data-count=(c.count) {
                    div.label { (badge(c.status)) }
                    div.value { (c.count) }
                }
            }
            div.card id="oldest-waiting" {
                div.label { "oldest waiting" }
                div.value { (o.oldest_waiting_ms.map(span).unwrap_or_else(|| "none".into())) }
            }
            div.card id="failure-rate" {
                div.label { "dead of finished, last hour" }
                div.value { (rate) }
                @if o.failure_rate_last_hour.is_none() { div.hint { "nothing finished" } }
            }
        }
        p.counts-age id="counts-age" data-as-of=(o.counts_as_of) data-age-ms=(o.counts_age_ms) {
            "Counts as of " (o.counts_age_ms / 1000) " s ago (" (time_el(o.counts_as_of))
            "): counted again in the background when a view finds them older than "
            (state.counts.max_age_ms() / 1000) " s."
        }
        (charts::finished_bars("chart-hour", "Finished per minute, last hour", "minute", &hour, now))
        (charts::finished_bars("chart-day", "Finished per 15 minutes, last day", "15 minutes", &quarter_hours, now))
        (charts::depth_line("chart-depth", "Queue depth, last day", depth, now - 24 * 3600 * 1000, now))
        @if !policies.is_empty() {
            h2 { a href={ (base) "/policies" } { "Queues" } }
            table id="queues" {
                thead { tr { th { "queue" } th { "state" } th.num { "running" } th.num { "waiting" } th.num { "concurrency" } } }
                tbody {
                    @for p in &policies {
                        @let (running, waiting) = load.get(&p.queue).copied().unwrap_or_default();
                        tr data-queue=(p.queue) data-paused=(p.paused) {
                            td { (p.queue) }
                            td { @if p.paused { span.badge.dead { "paused" } } @else { "running" } }
                            td.num { (running) }
                            td.num { (waiting) }
                            td.num { (p.concurrency.map_or("code's".to_string(), |n| n.to_string())) }
                        }
                    }
                }
            }
        }
        h2 { "By executor" }
        table id="executor-counts" {
            thead { tr { th { "executor" } @for status in Status::ALL { th.num { (status.as_str()) } } } }
            tbody {
                @for (executor, by_status) in &executors {
                    tr data-executor=(executor) {
                        td { a href={ (base) "/requests?executor=" (urlencode(executor)) } { (executor) } }
                        @for status in Status::ALL {
                            td.num { (by_status.get(status.as_str()).copied().unwrap_or(0)) }
                        }
                    }
                }
            }
        }
        @if executors.is_empty() { p.empty id="no-executor-counts" { "No request stored yet." } }
    })
}

/// The query string of the requests page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListParams {
    #[serde(flatten)]
    pub(crate) filter: FilterForm,
    #[serde(flatten)]
    pub(crate) page: PageForm,
    #[serde(flatten)]
    pub(crate) notice: NoticeParams,
}

/// The filter form, with the values of `filter`.
fn filter_form(base: &str, filter: &FilterForm, order: Order) -> Markup {
    let field = |name: &str, label: &str, value: &Option<String>| {
        html! {
            label for={ "filter-" (name) } { (label) }
            input id={ "filter-" (name) } name=(name) value=(value.as_deref().unwrap_or(""));
        }
    };
    html! {
        form.filters id="filter-form" method="get" action={ (base) "/requests" } {
            label for="filter-status" { "status" }
            select id="filter-status" name="status" {
                option value="" { "any" }
                @for status in Status::ALL {
                    option value=(status.as_str()) selected[filter.status.as_deref() == Some(status.as_str())] { (status.as_str()) }
                }
            }
            (field("executor", "executor", &filter.executor))
            (field("application", "application", &filter.application))
            (field("key", "key", &filter.key))
            (field("tag", "tag", &filter.tag))
            (field("arg", "argument path:value", &filter.arg))
            (field("id", "id", &filter.id))
            (field("remark", "remark has", &filter.remark))
            (field("error", "error has", &filter.error))
            label for="filter-any_case" {
                input id="filter-any_case" type="checkbox" name="any_case" value="on" checked[filter.any_case.as_deref() == Some("on")];
                " any case"
            }
            (field("from", "created from", &filter.from))
            (field("to", "created before", &filter.to))
            label for="filter-order" { "order" }
            select id="filter-order" name="order" {
                option value="newest" selected[order == Order::Newest] { "newest first" }
                option value="oldest" selected[order == Order::Oldest] { "oldest first" }
            }
            button id="filter-submit" type="submit" { "Filter" }
            a id="filter-clear" href={ (base) "/requests" } { "clear" }
        }
    }
}

/// The filter's fields as hidden inputs, for the action form.
pub(crate) fn hidden_filter(filter: &FilterForm) -> Markup {
    let fields = [
        ("status", &filter.status),
        ("executor", &filter.executor),
        ("application", &filter.application),
        ("key", &filter.key),
        ("tag", &filter.tag),
        ("arg", &filter.arg),
        ("any_case", &filter.any_case),
        ("id", &filter.id),
        ("remark", &filter.remark),
        ("error", &filter.error),
        ("from", &filter.from),
        ("to", &filter.to),
    ];
    html! {
        @for (name, value) in fields {
            @if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                input type="hidden" name=(name) value=(value);
            }
        }
    }
}

/// Requests: the filter, a keyset page, and (for operators) the actions on every match.
pub(crate) async fn requests(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    RawQuery(query): RawQuery,
) -> Response {
    let known = [
        &super::filter::FIELDS[..],
        &super::filter::PAGE_FIELDS[..],
        &super::views::NOTICE_FIELDS[..],
    ];
    let params: ListParams = match super::filter::known_fields_only(query.as_deref(), &known)
        .and_then(|()| {
            serde_urlencoded::from_str(query.as_deref().unwrap_or("")).map_err(|e| e.to_string())
        }) {
        Ok(params) => params,
        Err(message) => return error_page(&base, &who, StatusCode::BAD_REQUEST, &message),
    };
    let list = match super::reads::request_list(&state, &params.filter, &params.page).await {
        Ok(list) => list,
        Err(refused) => return error_page(&base, &who, refused.status, &refused.message),
    };
    let (rows, page_spec) = (&list.rows, list.page);
    let filter_qs = params.filter.to_query_string();
    let order = match page_spec.order {
        Order::Newest => "newest",
        Order::Oldest => "oldest",
    };
    let next = list.next.map(|cursor| {
        format!(
            "{base}/requests?{filter_qs}{sep}order={order}&after={}&limit={}",
            cursor.to_text(),
            page_spec.limit,
            sep = if filter_qs.is_empty() { "" } else { "&" },
        )
    });
    let body = html! {
        (super::views::refreshing(10))
        (notice(params.notice.text().as_deref(), None))
        (filter_form(&base, &params.filter, page_spec.order))
        @let operator = can_act(&who);
        @if operator && !rows.is_empty() {
            // The ticked rows' boxes belong to this form (`form=` on each).
            form.actions id="selected-form" method="post" action={ (base) "/actions/selected" } {
                (csrf_field(&who))
                input type="hidden" name="back" value={ "/requests?" (filter_qs) };
                label for="selected-action" { "On the ticked requests:" }
                select id="selected-action" name="action" {
                    @for a in Action::ALL { @if a != Action::ReplayDead { option value=(a.as_str()) { (action_label(a)) } } }
                }
                button id="selected-submit" type="submit" { "Act" }
            }
        }
        table id="requests" {
            thead { tr {
                @if operator { th { span.hint { "pick" } } }
                th { "id" } th { "status" } th { "executor" } th.num { "attempts" } th { "key" } th { "created" } th { "last error" }
            } }
            tbody {
                @for r in rows {
                    tr data-request-id=(r.id) data-status=(r.status.as_str()) {
                        @if operator {
                            td { input.pick type="checkbox" name="id" value=(r.id) form="selected-form" aria-label={ "request " (r.id) }; }
                        }
                        td { a.request-link href={ (base) "/requests/" (r.id) } { (r.id) } }
                        td { (badge(r.status)) }
                        td { (r.executor) }
                        td.num { (r.exec_count) "/" (r.max_attempts) }
                        td.key title=(visible(r.idempotency_key.as_deref().unwrap_or(""))) { (visible(r.idempotency_key.as_deref().unwrap_or(""))) }
                        td { (time_el(r.create_time)) }
                        td.error-text { (visible(&r.last_error.as_deref().map(|e| crate::base::text::capped(e, 160)).unwrap_or_default())) }
                    }
                }
            }
        }
        @if rows.is_empty() { p id="no-requests" { "No request matches." } }
        @if let (Some(searched), Some(next)) = (list.searched, &next) {
            p id="search-window" data-searched=(searched) {
                "Searched " (searched) " requests without filling the page. "
                a id="search-continue" href=(next) { "Continue searching →" }
            }
        } @else if let Some(next) = &next {
            p { a id="next-page" href=(next) { "Next page →" } }
        }
        @if can_act(&who) {
            form.actions id="action-form" method="post" action={ (base) "/actions" } {
                (csrf_field(&who))
                (hidden_filter(&params.filter))
                label for="action-select" { "On every request matching this filter:" }
                select id="action-select" name="action" {
                    @for a in Action::ALL { option value=(a.as_str()) { (action_label(a)) } }
                }
                button id="action-submit" type="submit" { "Review…" }
            }
        }
    };
    page(StatusCode::OK, layout(&base, Some(&who), "Requests", body))
}

/// JSON text, pretty when it parses.
fn pretty(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| json.to_string())
}

/// Request detail: arguments, fields, the attempts as a timeline, the caller's trace.
pub(crate) async fn request_detail(
    PageWho { who, base }: PageWho,
    Shared(state): Shared<Arc<State>>,
    Path(id): Path<String>,
    Query(params): Query<NoticeParams>,
) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return error_page(
            &base,
            &who,
            StatusCode::BAD_REQUEST,
            "a request id is a whole number",
        );
    };
    let (request, attempts) = match super::reads::request_with_attempts(&state, id).await {
        Ok(found) => found,
        Err(refused) => return error_page(&base, &who, refused.status, &refused.message),
    };
    let r = &request;
    let runs = attempts.last().map_or(1, |a| a.run);
    // What the body returned, when the record keeps it (a failed read shows nothing).
    let result = match r.status {
        Status::Success => state
            .rt
            .result::<serde_json::Value>(id)
            .await
            .ok()
            .flatten(),
        _ => None,
    };
    let partial = result
        .as_ref()
        .and_then(|v| serde_json::from_value::<crate::Partial>(v.clone()).ok());
    // Its durable steps (a failed read shows none).
    let steps = state.rt.steps(id).await.unwrap_or_default();
    // A request that may still change refreshes itself; a finished one stays.
    let live = matches!(r.status, Status::Init | Status::Running | Status::Failed);
    // Waiting for a paused executor (a pause, or its queue's policy) waits until resumed.
    let paused = matches!(r.status, Status::Init | Status::Failed)
        && state
            .rt
            .paused()
            .await
            .map(|p| p.iter().any(|p| p.executor == r.executor))
            .unwrap_or(false);
    let queue = state
        .rt
        .inner
        .registry
        .defs()
        .find(|d| d.name == r.executor)
        .map(|d| d.queue.unwrap_or(d.name));
    let policy_paused = matches!(r.status, Status::Init | Status::Failed)
        && match queue {
            Some(queue) => state
                .rt
                .queue_policies()
                .await
                .map(|p| p.iter().any(|p| p.queue == queue && p.paused))
                .unwrap_or(false),
            None => false,
        };
    let body = html! {
        @if live { (super::views::refreshing(5)) }
        (notice(params.text().as_deref(), None))
        @if paused || policy_paused {
            p.notice id="request-paused" {
                span.badge.dead { "paused" }
                @if policy_paused { " its queue's policy is paused: it waits until the policy lets it go (Policies)" }
                @else { " its executor is paused: it waits until resumed (Executors)" }
            }
        }
        dl.fields id="request" data-request-id=(r.id) data-status=(r.status.as_str()) {
            dt { "status" } dd id="request-status" { (badge(r.status)) }
            dt { "executor" } dd { (r.executor) }
            dt { "application" } dd { (r.application_name) }
            dt { "strategy" } dd { (r.strategy) }
            dt { "sign" } dd { code { (r.sign) } }
            dt { "remark" } dd { (visible(&r.remark)) }
            dt { "key" } dd id="request-key" { (visible(r.idempotency_key.as_deref().unwrap_or("—"))) }
            dt { "priority" } dd { (r.priority) }
            @if !r.tags.is_empty() {
                dt { "tags" } dd id="request-tags" {
                    @for tag in &r.tags {
                        a.tag href={ (base) "/requests?" (serde_urlencoded::to_string([("tag", tag)]).unwrap_or_default()) } { (visible(tag)) } " "
                    }
                }
            }
            @if let Some(deadline) = r.deadline_at {
                dt { "deadline" } dd id="request-deadline" { (time_el(deadline)) }
            }
            @if let (Some(asked), Status::Running) = (r.cancel_requested, r.status) {
                dt { "cancel" } dd id="request-cancel-asked" { "asked at " (time_el(asked)) "; the body is told within about a second" }
            }
            dt { "attempts" } dd id="request-attempts" { (r.exec_count) " of " (r.max_attempts) @if runs > 1 { " in run " (runs) } }
            dt { "created" } dd { (time_el(r.create_time)) }
            dt { "updated" } dd { (time_el(r.update_time)) }
            @if matches!(r.status, Status::Init | Status::Failed) {
                // Only a waiting request runs next; a finished one's run_at is history.
                dt { "runs at" } dd id="request-run-at" { (time_el(r.run_at)) }
            }
            @if let Some(p) = r.progress {
                dt { "progress" } dd id="request-progress" {
                    (p.done) " of " (p.total)
                    @if p.total > 0 { " (" (p.done.saturating_mul(100) / p.total) "%)" }
                }
            }
            @if let Some(owner) = &r.lease_owner {
                dt { "held by" } dd { (owner) " until " (time_el(r.lease_until.unwrap_or(0))) }
            }
            @if let Some(error) = &r.last_error {
                @if r.status == Status::Success {
                    // It succeeded since: the error is history, not its state.
                    dt { "earlier attempt's error" } dd { pre.error-text id="request-earlier-error" { (visible(error)) } }
                } @else {
                    dt { "last error" } dd { pre.error-text id="request-error" { (visible(error)) } }
                }
            }
        }
        @if let Some(value) = &result {
            h2 { "Result" }
            @if let Some(p) = &partial {
                p id="request-partial" { "Partial success: " (p.ok) " went through, " (p.failed) " did not" }
            }
            pre.json id="request-result" { (visible(&serde_json::to_string_pretty(value).unwrap_or_default())) }
        }
        @if !steps.is_empty() {
            h2 { "Steps" }
            table id="request-steps" {
                thead { tr { th.num { "#" } th { "step" } th { "kept value" } } }
                tbody {
                    @for step in &steps {
                        tr {
                            td.num { (step.position + 1) }
                            td { (visible(&step.name)) }
                            td { code { (visible(&step.value_json)) } }
                        }
                    }
                }
            }
        }
        @if can_act(&who) && r.status == Status::Running {
            form.inline method="post" action={ (base) "/requests/" (r.id) "/cancel" } {
                (csrf_field(&who))
                button id="action-stop" type="submit" { "Ask it to stop" }
                span.hint { " its body is told within about a second (" code { "ctx.is_cancelled()" } "); it ends cancelled unless it succeeds" }
            }
        }
        h2 { "Arguments" }
        pre.json id="request-args" { (visible(&pretty(&crate::mask_sealed(&r.param_json)))) }
        h2 { "Caller's trace and baggage" }
        pre.json id="request-trace" { (r.trace_json.as_deref().map(pretty).unwrap_or_else(|| "none".into())) }
        h2 { "Attempts" }
        @if attempts.is_empty() {
            p id="no-attempts" { "No attempt logged yet: failures are logged, successes only with `log_success`." }
        }
        ol.timeline id="attempts" data-runs=(runs) {
            @for a in &attempts {
                @let log = &a.log;
                li class=[a.replayed.then_some("replayed")] data-seq=(a.seq) data-run=(a.run) data-attempt=(log.attempt) data-outcome=(log.outcome) {
                    @if runs > 1 && (a.seq == 1 || a.replayed) {
                        div.run-start {
                            "Run " (a.run)
                            @if a.replayed { span.hint { " — started over (a retry or replay of a finished request): attempts numbered from 1 again" } }
                        }
                    }
                    span class={ "badge " (if log.outcome == "success" { "success" } else { "failed" }) } { (log.outcome) }
                    " " strong.attempt-no { @if runs > 1 { "run " (a.run) ", " } "attempt " (log.attempt) }
                    " on " (log.worker) ", started " (time_el(log.started)) ", took " (span(log.finished - log.started))
                    @if let Some(error) = &log.error { pre.error-text { (visible(error)) } }
                }
            }
        }
        @if can_act(&who) {
            h2 { "Actions" }
            div.actions {
                @for a in Action::ALL {
                    @if a != Action::Delete && a.applies_to().contains(&r.status) {
                        form.inline method="post" action={ (base) "/actions" } {
                            (csrf_field(&who))
                            input type="hidden" name="id" value=(r.id);
                            input type="hidden" name="action" value=(a.as_str());
                            input type="hidden" name="confirm" value="yes";
                            input type="hidden" name="up_to" value="1";
                            input type="hidden" name="back" value={ "/requests/" (r.id) };
                            button id={ "action-" (a.as_str()) } type="submit" { (action_label(a)) }
                        }
                    }
                }
            }
            @if Action::Delete.applies_to().contains(&r.status) {
                // Apart from the others, and through the confirmation page: it cannot be undone.
                div.actions.danger {
                    form.inline method="post" action={ (base) "/actions" } {
                        (csrf_field(&who))
                        input type="hidden" name="id" value=(r.id);
                        input type="hidden" name="action" value="delete";
                        button id="action-delete" type="submit" { "Delete…" }
                    }
                }
            }
        }
    };
    let title = format!("Request {id}");
    page(StatusCode::OK, layout(&base, Some(&who), &title, body))
}
