//! The chaos test's processes: three worker instances of `examples/chaos.rs`, each
//! behind a fault proxy of its own, restarted after kills and stops; the faults applied to
//! them and logged with their wall-clock windows, for the checker.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::checker::{Fault, FaultKind, Process};
use crate::common::now_ms;
use crate::common::proxy::Proxy;
use crate::schedule::{Action, Planned};

/// The chaos example, built by `cargo test` next to the test binaries.
pub fn chaos_binary() -> PathBuf {
    let deps = std::env::current_exe().expect("test binary path");
    let target = deps.parent().and_then(|d| d.parent()).expect("target dir");
    let path = target.join("examples").join("chaos");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace --all-features` (which builds the examples), \
         or `cargo build --all-features --example chaos` first",
        path.display()
    );
    // `cargo test --test chaos` does not rebuild examples: refuse to test an old build.
    let built = modified(&path);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let newest = [
        "examples/chaos.rs",
        "examples/chaos",
        "src",
        "runtime/src",
        "macros/src",
        "migrations",
    ]
    .iter()
    .map(|p| newest_under(&root.join(p)))
    .max()
    .flatten();
    assert!(
        newest.map_or(true, |source| source <= built),
        "{} is older than the sources: run `cargo build --all-features --example chaos` \
         (or `cargo test --workspace --all-features`) first",
        path.display()
    );
    path
}

fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("modification time")
}

/// The latest modification time of a file, or of the files under a directory.
fn newest_under(path: &std::path::Path) -> Option<std::time::SystemTime> {
    if path.is_dir() {
        std::fs::read_dir(path)
            .ok()?
            .filter_map(|e| e.ok())
            .filter_map(|e| newest_under(&e.path()))
            .max()
    } else {
        path.exists().then(|| modified(path))
    }
}

/// The worker settings: short leases, so that rescues happen within the run.
pub const LEASE_MS: u64 = 3_000;
const WORKER_FLAGS: &[&str] = &[
    "--lease-ms",
    "3000",
    "--heartbeat-ms",
    "500",
    "--sweep-ms",
    "500",
    "--grace-ms",
    "1000",
    "--concurrency",
    "8",
    "--memory-calls",
];

/// A started process and the file its stderr goes to.
pub struct Started {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

/// Starts the chaos example with `args` and waits (60 s at most) for its `ready` line;
/// its later stdout lines are printed with its name.
pub async fn start_process(name: &str, args: &[String], logs: &std::path::Path) -> Started {
    let log = logs.join(format!("{name}.log"));
    let mut child = Command::new(chaos_binary())
        .args(args)
        .env("RUST_LOG", "async_exec=info,chaos=info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("start the chaos example");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{name} not ready in 60 s: {}", read(&log)))
        .expect("read stdout");
    assert!(
        ready.as_deref().is_some_and(|l| l.starts_with("ready")),
        "{name} did not start: {ready:?} {}",
        read(&log)
    );
    let owned = name.to_string();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            println!("{owned}: {line}");
        }
    });
    Started {
        name: name.to_string(),
        child,
        log,
    }
}

pub fn read(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Sends `signal` (`TERM`, `USR1`) to a running child.
pub async fn signal(child: &Child, signal: &str) {
    let Some(pid) = child.id() else { return };
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .await;
}

/// One of the three instances: its proxy, its current process, its clock offset.
struct Slot {
    label: String,
    generation: u32,
    clock_offset_ms: i64,
    worker: Option<Started>,
}

/// What the cluster did, for the checker.
#[derive(Default)]
pub struct Log {
    pub faults: Vec<Fault>,
    pub processes: Vec<Process>,
    /// Processes that exited without being told to, with their log's tail.
    pub incidents: Vec<String>,
    pub logs: Vec<PathBuf>,
}

/// Three worker instances, each behind a proxy of its own.
pub struct Cluster {
    direct_url: String,
    logs: PathBuf,
    proxies: Vec<Proxy>,
    proxied: Vec<String>,
    slots: Vec<tokio::sync::Mutex<Slot>>,
    pub log: Mutex<Log>,
}

impl Cluster {
    /// Starts three workers on `url`, each through a proxy.
    pub async fn start(url: &str) -> Arc<Cluster> {
        let mut proxies = Vec::new();
        let mut proxied = Vec::new();
        let mut slots = Vec::new();
        for i in 0..3 {
            let (proxy, url) = Proxy::for_url(url).await;
            proxies.push(proxy);
            proxied.push(url);
            slots.push(tokio::sync::Mutex::new(Slot {
                label: format!("w{}", i + 1),
                generation: 0,
                clock_offset_ms: 0,
                worker: None,
            }));
        }
        let cluster = Arc::new(Cluster {
            direct_url: url.to_string(),
            logs: {
                let dir = std::env::temp_dir().join(format!(
                    "async-exec-chaos-{}-{:08x}",
                    std::process::id(),
                    rand::random::<u32>()
                ));
                std::fs::create_dir_all(&dir).expect("log dir");
                dir
            },
            proxies,
            proxied,
            slots,
            log: Mutex::new(Log::default()),
        });
        for i in 0..3 {
            let mut slot = cluster.slots[i].lock().await;
            cluster.spawn(i, &mut slot).await;
        }
        cluster
    }

    /// Where the processes' logs are (kept when the test fails).
    pub fn logs_dir(&self) -> &std::path::Path {
        &self.logs
    }

    async fn spawn(&self, i: usize, slot: &mut Slot) {
        slot.generation += 1;
        let name = format!("{}.g{}", slot.label, slot.generation);
        let mut args: Vec<String> = vec![
            "--url".into(),
            self.proxied[i].clone(),
            "--history-url".into(),
            self.direct_url.clone(),
            "--instance".into(),
            name.clone(),
            "--clock-offset-ms".into(),
            slot.clock_offset_ms.to_string(),
        ];
        args.extend(WORKER_FLAGS.iter().map(|s| s.to_string()));
        let started_at = now_ms();
        let started = start_process(&name, &args, &self.logs).await;
        let mut log = self.log.lock().unwrap();
        log.logs.push(started.log.clone());
        log.processes.push(Process {
            name,
            instance: slot.label.clone(),
            started: started_at,
            exited: None,
            killed: false,
            clean_exit: false,
            clock_offset_ms: slot.clock_offset_ms,
        });
        slot.worker = Some(started);
    }

    fn exited(&self, name: &str, killed: bool, clean: bool) {
        let mut log = self.log.lock().unwrap();
        if let Some(p) = log.processes.iter_mut().rev().find(|p| p.name == name) {
            p.exited = Some(now_ms());
            p.killed = killed;
            p.clean_exit = clean;
        }
    }

    fn fault(&self, kind: FaultKind, slot: &Slot, started: i64, detail: String) {
        self.log.lock().unwrap().faults.push(Fault {
            kind,
            instance: slot.label.clone(),
            started,
            ended: now_ms(),
            detail,
        });
    }

    /// Restarts the slot's worker if it exited without being told to (and says so).
    async fn revive(&self, i: usize, slot: &mut Slot) {
        let gone = match slot.worker.as_mut() {
            Some(w) => w.child.try_wait().expect("try_wait"),
            None => None,
        };
        if let Some(status) = gone {
            let w = slot.worker.take().expect("worker");
            self.exited(&w.name, false, false);
            let log = read(&w.log);
            let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
            self.log
                .lock()
                .unwrap()
                .incidents
                .push(format!("{} exited on its own ({status}): {tail}", w.name));
        }
        if slot.worker.is_none() {
            self.spawn(i, slot).await;
        }
    }

    /// SIGKILL; the process is gone when this returns.
    async fn kill(&self, slot: &mut Slot) {
        let mut w = slot.worker.take().expect("a running worker");
        let _ = w.child.start_kill();
        let _ = w.child.wait().await;
        self.exited(&w.name, true, false);
    }

    /// SIGTERM and wait (30 s at most, then SIGKILL).
    async fn terminate(&self, slot: &mut Slot) {
        let mut w = slot.worker.take().expect("a running worker");
        signal(&w.child, "TERM").await;
        let clean = match tokio::time::timeout(Duration::from_secs(30), w.child.wait()).await {
            Ok(Ok(status)) => status.success(),
            _ => {
                let _ = w.child.start_kill();
                let _ = w.child.wait().await;
                false
            }
        };
        self.exited(&w.name, false, clean);
    }

    /// Applies one planned fault; faults on one instance take turns.
    pub async fn apply(&self, planned: Planned) {
        let i = planned.instance;
        let mut slot = self.slots[i].lock().await;
        self.revive(i, &mut slot).await;
        let proxy = &self.proxies[i];
        let t0 = now_ms();
        match planned.action {
            Action::Kill { restart_ms } => {
                self.kill(&mut slot).await;
                self.fault(
                    FaultKind::Kill,
                    &slot,
                    t0,
                    format!("restart after {restart_ms} ms"),
                );
                tokio::time::sleep(Duration::from_millis(restart_ms)).await;
                self.spawn(i, &mut slot).await;
            }
            Action::Term { restart_ms } => {
                self.terminate(&mut slot).await;
                self.fault(
                    FaultKind::Term,
                    &slot,
                    t0,
                    format!("restart after {restart_ms} ms"),
                );
                tokio::time::sleep(Duration::from_millis(restart_ms)).await;
                self.spawn(i, &mut slot).await;
            }
            Action::Skew { offset_ms } => {
                self.terminate(&mut slot).await;
                self.fault(FaultKind::Term, &slot, t0, "for a skewed restart".into());
                slot.clock_offset_ms = offset_ms;
                let t1 = now_ms();
                self.spawn(i, &mut slot).await;
                self.fault(
                    FaultKind::Skew,
                    &slot,
                    t1,
                    format!("clock off by {offset_ms} ms"),
                );
            }
            Action::Refuse { ms } => {
                proxy.cut();
                tokio::time::sleep(Duration::from_millis(ms)).await;
                proxy.restore();
                self.fault(FaultKind::Refuse, &slot, t0, format!("{ms} ms"));
            }
            Action::Reset { ms, every_ms } => {
                let until = tokio::time::Instant::now() + Duration::from_millis(ms);
                let mut resets = 0;
                while tokio::time::Instant::now() < until {
                    proxy.reset();
                    resets += 1;
                    tokio::time::sleep(Duration::from_millis(every_ms)).await;
                }
                self.fault(
                    FaultKind::Reset,
                    &slot,
                    t0,
                    format!("{resets} resets, every {every_ms} ms for {ms} ms"),
                );
            }
            Action::Stall { ms } => {
                proxy.stall();
                tokio::time::sleep(Duration::from_millis(ms)).await;
                proxy.restore();
                self.fault(FaultKind::Stall, &slot, t0, format!("{ms} ms"));
            }
            Action::BlackHole { notice_ms } => {
                proxy.black_hole_noticed_after(Duration::from_millis(notice_ms));
                tokio::time::sleep(Duration::from_millis(notice_ms)).await;
                self.fault(
                    FaultKind::BlackHole,
                    &slot,
                    t0,
                    format!("open connections silent, new ones pass; noticed after {notice_ms} ms"),
                );
            }
            Action::Latency { ms, delay_ms } => {
                proxy.set_latency(Duration::from_millis(delay_ms));
                tokio::time::sleep(Duration::from_millis(ms)).await;
                proxy.set_latency(Duration::ZERO);
                self.fault(
                    FaultKind::Latency,
                    &slot,
                    t0,
                    format!("{delay_ms} ms per chunk for {ms} ms"),
                );
            }
        }
    }

    /// Every proxy forwarding without delay, every instance running.
    pub async fn restore_all(&self) {
        for (i, proxy) in self.proxies.iter().enumerate() {
            proxy.restore();
            proxy.set_latency(Duration::ZERO);
            let mut slot = self.slots[i].lock().await;
            self.revive(i, &mut slot).await;
        }
    }

    /// The names of the processes running now.
    pub async fn current(&self) -> Vec<String> {
        let mut names = Vec::new();
        for slot in &self.slots {
            if let Some(w) = &slot.lock().await.worker {
                names.push(w.name.clone());
            }
        }
        names
    }

    /// Asks every instance to submit calls of its own (they run there).
    pub async fn probe_all(&self) {
        for slot in &self.slots {
            if let Some(w) = &slot.lock().await.worker {
                signal(&w.child, "USR1").await;
            }
        }
    }

    /// Asks every instance to stop making in-memory calls (SIGUSR2).
    pub async fn stop_memory_calls(&self) {
        for slot in &self.slots {
            if let Some(w) = &slot.lock().await.worker {
                signal(&w.child, "USR2").await;
            }
        }
    }

    /// SIGTERM to every instance at once; waits for each (30 s at most, then SIGKILL).
    pub async fn stop_all(&self) {
        let mut slots = Vec::new();
        for slot in &self.slots {
            slots.push(slot.lock().await);
        }
        for slot in &slots {
            if let Some(w) = &slot.worker {
                signal(&w.child, "TERM").await;
            }
        }
        for slot in &mut slots {
            let Some(mut w) = slot.worker.take() else {
                continue;
            };
            let clean = match tokio::time::timeout(Duration::from_secs(30), w.child.wait()).await {
                Ok(Ok(status)) => status.success(),
                _ => {
                    let _ = w.child.start_kill();
                    let _ = w.child.wait().await;
                    false
                }
            };
            self.exited(&w.name, false, clean);
        }
    }
}
