//! `schedules`: the periodic calls the live instances announce, with their next ticks.
//! The CLI links no executors of the application: what it lists is what the instances
//! that run workers (the ones that call the schedules) wrote in `async_instance`.

use async_exec::Runtime;
use serde_json::json;

use crate::commands::Printed;
use crate::failure::Failure;
use crate::render::{safe, table};
use crate::time::format_ms;

/// `schedules [--next N]`.
pub(crate) async fn schedules(rt: &Runtime, next: usize) -> Result<Printed, Failure> {
    let schedules = rt.announced_schedules(next).await?;
    let documents: Vec<serde_json::Value> = schedules
        .iter()
        .map(|s| {
            json!({
                "executor": s.executor,
                "schedule": s.schedule,
                "describe": s.schedule.describe(),
                "next": s.next,
                "error": s.error,
                "instances": s.instances,
            })
        })
        .collect();
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .map(|s| {
            vec![
                safe(&s.executor),
                safe(&s.schedule.describe()),
                match &s.error {
                    Some(error) => safe(error),
                    None => s
                        .next
                        .iter()
                        .map(|&tick| format_ms(tick))
                        .collect::<Vec<_>>()
                        .join(", "),
                },
                s.instances.len().to_string(),
            ]
        })
        .collect();
    let human = if rows.is_empty() {
        "no live instance of this application that runs workers announces a schedule \
         (`every = ...` or `cron = ...`)\n"
            .to_string()
    } else {
        table(
            &["EXECUTOR", "SCHEDULE", "NEXT TICKS (UTC)", "INSTANCES"],
            &rows,
        )
    };
    Ok(Printed::ok(json!({ "schedules": documents }), human))
}
