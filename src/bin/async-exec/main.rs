//! `async-exec`: the operators' command-line tool. Looks at and acts on the requests of
//! an application through the runtime's public API, on any backend, without running
//! anything itself: `migrate`, `stats`, `list`, `show`, `retry`, `cancel`, `delete`,
//! `pause`, `resume`, `queues`, `queue-limits`, `purge`, `schedules`. Its actions are written to the audit trail that the
//! console shows, as done by `cli:<os user>`. Human tables by default, one JSON document with `--json`.
//!
//! Exit status: 0 done, 1 failed (the reason on stderr, with what to do), 2 usage.

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

mod args;
mod commands;
mod connect;
mod failure;
mod operator;
mod redact;
mod render;
mod schedules;
mod time;

use args::{Cli, Command};
use commands::{Action, Printed};
use failure::Failure;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(url) = cli.url.clone() else {
        Cli::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "no database given: pass --url (e.g. --url sqlite:app.db) or set ASYNC_EXEC_DATABASE_URL",
            )
            .exit()
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: could not start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let json = cli.json;
    match runtime.block_on(run(cli, &url)) {
        Ok(printed) => {
            let written = if json {
                let mut text =
                    serde_json::to_string_pretty(&printed.json).expect("the output serializes");
                text.push('\n');
                std::io::stdout().write_all(text.as_bytes())
            } else {
                std::io::stdout().write_all(printed.human.as_bytes())
            };
            if written.is_err() {
                return ExitCode::from(1);
            }
            match printed.failed {
                None => ExitCode::SUCCESS,
                Some(message) => {
                    eprintln!("error: {message}");
                    ExitCode::from(1)
                }
            }
        }
        Err(failure) => {
            eprintln!("error: {}", redact::scrub(&failure.to_string(), &url));
            failure.exit_code()
        }
    }
}

async fn run(cli: Cli, url: &str) -> Result<Printed, Failure> {
    let migrate = matches!(cli.command, Command::Migrate);
    // No application named: `stats` and `list` answer with the applications that have
    // records; the rest cannot act without one.
    let unnamed = cli.application.trim().is_empty();
    if unnamed
        && !matches!(
            cli.command,
            Command::Stats | Command::List(_) | Command::Migrate
        )
    {
        return Err(Failure::Failed(
            "no application given: pass --application NAME (`async-exec --application '' \
             stats` lists the applications that have requests)"
                .into(),
        ));
    }
    let application = if unnamed {
        // A name to open the runtime with; nothing is read or written under it.
        "async-exec-cli"
    } else {
        cli.application.as_str()
    };
    let rt = connect::open(url, application, migrate).await?;
    let printed = match cli.command {
        Command::Migrate => Ok(commands::migrate(&redact::url(url))),
        Command::Stats | Command::List(_) if unnamed => commands::applications_only(&rt).await,
        Command::Stats => commands::stats(&rt).await,
        Command::List(list) => commands::list(&rt, list).await,
        Command::Show { id } => commands::show(&rt, id).await,
        Command::Retry {
            ids,
            replay,
            reset_steps,
        } => {
            let action = match (replay, reset_steps) {
                (true, true) => Action::ReplayFromStart,
                (true, false) => Action::Replay,
                (false, _) => Action::Retry,
            };
            commands::act(&rt, action, &ids).await
        }
        Command::Cancel { ids, tag: None } => commands::act(&rt, Action::Cancel, &ids).await,
        Command::Cancel { tag: Some(tag), .. } => commands::cancel_tagged(&rt, &tag).await,
        Command::Delete { ids } => commands::act(&rt, Action::Delete, &ids).await,
        Command::Pause { executor } => commands::pause(&rt, &executor, true).await,
        Command::Resume { executor } => commands::pause(&rt, &executor, false).await,
        Command::Queues => commands::queues(&rt).await,
        Command::Flow { queue, partitions } => commands::flow(&rt, &queue, partitions).await,
        Command::QueueLimits {
            queue,
            concurrency,
            per_instance,
            rate,
        } => commands::queue_limits(&rt, &queue, (concurrency, per_instance, rate)).await,
        Command::Partition {
            queue,
            partition,
            weight,
            concurrency,
            rate,
            clear,
        } => commands::partition(&rt, &queue, &partition, (weight, concurrency, rate), clear).await,
        Command::Policy(policy) => commands::policy(&rt, policy).await,
        Command::Purge(purge) => commands::purge(&rt, purge).await,
        Command::Schedules { next } => schedules::schedules(&rt, usize::from(next)).await,
    };
    let stopped = rt.shutdown().await;
    let printed = printed?;
    stopped?;
    Ok(printed)
}
