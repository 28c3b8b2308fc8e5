//! The commands that act on requests: `retry`, `replay`, `cancel` (by id or tag), `delete`,
//! and `purge`.

use async_exec::{Error, Purge, RequestId, RequestQuery, Runtime};
use serde_json::json;

use crate::args::PurgeArgs;
use crate::failure::Failure;
use crate::render::safe;

use super::{counted, not_found, Printed};

/// What `retry`, `cancel` and `delete` do to one request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Action {
    Retry,
    Replay,
    /// A replay whose durable steps are forgotten (`retry --replay --reset-steps`).
    ReplayFromStart,
    Cancel,
    Delete,
}

impl Action {
    fn past(self) -> &'static str {
        match self {
            Action::Retry => "queued to run again",
            Action::Replay => "queued to run again (replay)",
            Action::ReplayFromStart => "queued to run again (replay, its steps forgotten)",
            Action::Cancel => "cancelled",
            Action::Delete => "deleted",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Replay => "replay",
            Action::ReplayFromStart => "replay-from-start",
            Action::Cancel => "cancel",
            Action::Delete => "delete",
        }
    }

    /// Does it; what was done, in words.
    async fn on(self, rt: &Runtime, id: RequestId) -> async_exec::Result<&'static str> {
        match self {
            Action::Retry => rt.retry_now(id).await.map(|()| self.past()),
            Action::Replay => rt.replay(id).await.map(|()| self.past()),
            Action::ReplayFromStart => rt.replay_from_start(id).await.map(|()| self.past()),
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

/// `cancel --tag TAG`: every waiting request with the tag cancelled and every running one
/// asked to stop, in one transaction (audited as the console's action on a filter is).
pub(crate) async fn cancel_tagged(rt: &Runtime, tag: &str) -> Result<Printed, Failure> {
    let query = RequestQuery::default().tag(tag);
    let done = rt.cancel_matching(&query).await?;
    let target = serde_json::to_string(&query).expect("a query serializes");
    rt.audit_action(&crate::operator::actor(), "cancel", &target, done.total())
        .await?;
    Ok(Printed {
        json: json!({
            "action": "cancel",
            "tag": tag,
            "cancelled": done.cancelled,
            "stop_asked": done.stop_asked,
        }),
        human: format!(
            "{} with tag {} cancelled; {} asked to stop\n",
            counted(done.cancelled, "waiting request"),
            safe(tag),
            counted(done.stop_asked, "running request"),
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
