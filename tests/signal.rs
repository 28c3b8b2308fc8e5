//! `async_exec::shutdown_signal()` in a real process: this test binary runs itself again
//! as a child that waits on the signal (the ignored test `child_waits_for_the_signal`),
//! and the parent sends it SIGTERM or SIGINT. Without the handler, either signal would
//! kill the child instead of letting it print and exit 0.
#![cfg(unix)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// Set in the child's environment: only then does the child test wait.
const CHILD_VAR: &str = "ASYNC_EXEC_TEST_SIGNAL_CHILD";

/// Run by the parent tests below, in a child process: says it waits, waits for the
/// signal, says it got it.
#[tokio::test]
#[ignore = "run as a child process by the signal tests of this file"]
async fn child_waits_for_the_signal() {
    assert!(
        std::env::var_os(CHILD_VAR).is_some(),
        "run by the other tests of tests/signal.rs"
    );
    let waiting = tokio::spawn(async_exec::shutdown_signal());
    // The handlers are installed on the first poll: give the task one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("child: waiting");
    tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("no signal within 30 s")
        .unwrap();
    println!("child: signal received");
}

/// Starts the child, waits until it waits, sends it `signal`, and returns its exit
/// status and what it printed.
async fn signal_child(signal: &str) -> (std::process::ExitStatus, String) {
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_waits_for_the_signal",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the child did not start waiting within 30 s")
            .unwrap()
            .expect("the child ended before it waited");
        printed.push_str(&line);
        printed.push('\n');
        if line.contains("child: waiting") {
            break;
        }
    }
    let pid = child.id().unwrap().to_string();
    let sent = tokio::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .await
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
    while let Ok(Some(line)) = lines.next_line().await {
        printed.push_str(&line);
        printed.push('\n');
    }
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the child did not exit within 30 s after the signal")
        .unwrap();
    (status, printed)
}

#[tokio::test]
async fn sigterm_resolves_it() {
    let (status, printed) = signal_child("TERM").await;
    assert!(status.success(), "{status:?}\n{printed}");
    assert!(printed.contains("child: signal received"), "{printed}");
}

#[tokio::test]
async fn ctrl_c_resolves_it() {
    let (status, printed) = signal_child("INT").await;
    assert!(status.success(), "{status:?}\n{printed}");
    assert!(printed.contains("child: signal received"), "{printed}");
}
