//! Who acts, and where records are: the actor the tool's actions are audited as, and the
//! applications that have records (what `stats` and `list` answer for an empty
//! `--application`, and add when the one given has none).

use async_exec::{RequestId, RequestQuery, Runtime};
use serde_json::{json, Value};

use crate::render::{safe, table};

/// The audit trail's actor of this tool's actions: `cli:<os user>` (`$USER`, else
/// `$USERNAME`, else `cli:unknown`).
pub(crate) fn actor() -> String {
    let user = ["USER", "USERNAME", "LOGNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "unknown".into());
    format!("cli:{}", user.trim())
}

/// The audit target of an action on one request: the query that names it, as the
/// console writes for its request page.
pub(crate) fn target_of(id: RequestId) -> String {
    serde_json::to_string(&RequestQuery::default().id(id)).expect("a query serializes")
}

/// The applications with records, as JSON and as a table.
pub(crate) async fn applications(rt: &Runtime) -> async_exec::Result<(Value, String)> {
    let apps = rt.applications().await?;
    let json = Value::Array(
        apps.iter()
            .map(|(name, n)| json!({ "application": name, "requests": n }))
            .collect(),
    );
    let human = if apps.is_empty() {
        "no application has requests in this database\n".to_string()
    } else {
        let rows: Vec<Vec<String>> = apps
            .iter()
            .map(|(name, n)| vec![safe(name), n.to_string()])
            .collect();
        format!(
            "{}pass one with --application NAME\n",
            table(&["APPLICATION", "REQUESTS"], &rows)
        )
    };
    Ok((json, human))
}
