//! Issue 30 item 7: operators see flow. A queue at its limit with a backlog reads "limit
//! working"; a paused queue, or one whose due records nothing starts, reads "stuck"; the
//! saturation history is written by one instance per period and bounded by its retention;
//! the console's queue pages escape hostile names, and unknown names answer 404.
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use async_exec::{async_exec, batch, Backend, QueueLimits, Runtime, Verdict};
use common::TestDb;

/// A slow body of a queue limited to 2 at once.
#[async_exec(type = SaveAsync, queue = "flow_busy")]
async fn slow(n: u64) {
    let _ = n;
    tokio::time::sleep(Duration::from_millis(4_000)).await;
}

/// A body of a queue that the tests leave unserved or pause.
#[async_exec(type = SaveAsync, queue = "flow_idle")]
async fn unserved(n: u64) {
    let _ = n;
}

/// The queue with a name made to break pages (a queue's name has no control characters:
/// the attribute refuses them).
const HOSTILE: &str = "q<script>alert(\"x\")</script>&";

/// A partition made to break pages and terminals.
const HOSTILE_PARTITION: &str = "<img src=x onerror=alert(1)>\u{1b}[2J";

#[async_exec(type = SaveAsync, queue = "q<script>alert(\"x\")</script>&")]
async fn hostile(n: u64) {
    let _ = n;
}

/// Polls `f` until it answers `Some`, for at most `limit`.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = f().await {
            return found;
        }
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Running at the queue's limit of 2 while 4 due wait: "limit working", in the view, the
/// list, and the history the instance samples by itself (every second here).
async fn a_queue_at_its_limit_with_a_backlog_reads_limit_working<DB: Backend>(db: TestDb) {
    let rt = db
        .builder()
        .queue("flow_busy", QueueLimits::new().concurrency(2))
        .flow_sample_interval(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    batch((0..6).map(slow)).on(&rt).await.unwrap();
    // A start is counted when its body starts, a moment after its claim made the record
    // `running`.
    let flow = eventually(Duration::from_secs(10), "2 running and started", || async {
        let flow = rt.queue_flow("flow_busy", 10).await.unwrap();
        (flow.running == 2 && flow.started >= 2).then_some(flow)
    })
    .await;
    assert_eq!(flow.verdict, Verdict::LimitWorking, "{flow:#?}");
    // 4 wait until the first two end (4 s in): fewer when this machine is slow to look.
    assert_eq!(
        (flow.due, flow.concurrency),
        (flow.waiting, Some(2)),
        "{flow:#?}"
    );
    assert!((2..=4).contains(&flow.waiting), "{flow:#?}");
    assert!(flow.lag_ms.is_some_and(|lag| lag >= 0), "{flow:#?}");
    assert!(flow.reason.contains("2 of 2"), "{}", flow.reason);
    // Another instance, which runs nothing, reads the starts from `async_queue_stat`
    // (written every 2 s by the instance that started them).
    let observer = db
        .builder()
        .run_workers(false)
        .install_global(false)
        .start()
        .await
        .unwrap();
    let seen = eventually(Duration::from_secs(5), "starts written", || async {
        let flow = observer.queue_flow("flow_busy", 10).await.unwrap();
        (flow.started >= 2).then_some(flow)
    })
    .await;
    assert!(seen.finished <= seen.started, "{seen:#?}");
    observer.shutdown().await.unwrap();
    let listed = rt.queues_flow().await.unwrap();
    let busy = listed.iter().find(|q| q.queue == "flow_busy").unwrap();
    assert_eq!(busy.verdict, Verdict::LimitWorking, "{listed:#?}");
    let idle = listed.iter().find(|q| q.queue == "flow_idle").unwrap();
    assert_eq!(idle.verdict, Verdict::Idle, "{listed:#?}");
    let sample = eventually(Duration::from_secs(5), "a sample at the limit", || async {
        let history = rt
            .flow_history("flow_busy", Duration::from_secs(60))
            .await
            .unwrap();
        history
            .into_iter()
            .find(|s| s.verdict == Verdict::LimitWorking)
    })
    .await;
    assert_eq!((sample.running, sample.concurrency), (2, Some(2)));
    assert!(sample.due >= 1, "{sample:?}");
    rt.shutdown().await.unwrap();
}

/// Due records that nothing starts: at first "backlogged" (they just became due), "stuck"
/// at once when the queue is paused, and "stuck" once the oldest waited 5 s with no
/// start.
async fn a_paused_or_unserved_queue_reads_stuck<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    batch((0..3).map(unserved)).on(&rt).await.unwrap();
    let fresh = rt.queue_flow("flow_idle", 10).await.unwrap();
    assert_eq!((fresh.due, fresh.running, fresh.started), (3, 0, 0));
    assert_eq!(fresh.verdict, Verdict::Backlogged, "{fresh:#?}");
    rt.policy("flow_idle")
        .paused(true)
        .by("test")
        .apply()
        .await
        .unwrap();
    let paused = rt.queue_flow("flow_idle", 10).await.unwrap();
    assert!(paused.paused, "{paused:#?}");
    assert_eq!(paused.verdict, Verdict::Stuck, "{paused:#?}");
    assert!(paused.reason.starts_with("paused"), "{}", paused.reason);
    rt.policy("flow_idle")
        .paused(false)
        .by("test")
        .apply()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5_200)).await;
    let stuck = rt.queue_flow("flow_idle", 10).await.unwrap();
    assert!(!stuck.paused);
    assert!(stuck.lag_ms.unwrap() >= 5_000, "{stuck:#?}");
    assert_eq!(stuck.verdict, Verdict::Stuck, "{stuck:#?}");
    assert!(stuck.reason.contains("none started"), "{}", stuck.reason);
    let listed = rt.queues_flow().await.unwrap();
    let idle = listed.iter().find(|q| q.queue == "flow_idle").unwrap();
    assert_eq!(idle.verdict, Verdict::Stuck, "{listed:#?}");
    rt.shutdown().await.unwrap();
}

/// Two instances sample for 3 s, each trying every 100 ms, with periods of 1 s and a
/// history of 2 s: every period is written by one of them only, and the history keeps
/// none older than its retention.
async fn the_history_is_written_once_per_period_and_bounded<DB: Backend>(db: TestDb) {
    let start = |db: &TestDb| {
        db.builder()
            .run_workers(false)
            .install_global(false)
            .flow_sample_interval(Duration::from_secs(1))
            .flow_history(Duration::from_secs(2))
            .start()
    };
    let one = start(&db).await.unwrap();
    let two = start(&db).await.unwrap();
    unserved(1).on(&one).await.unwrap();
    let sample = |rt: Runtime| async move {
        let mut taken = Vec::new();
        for _ in 0..30 {
            if let Some(at) = rt.sample_flow().await.unwrap() {
                taken.push(at);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        taken
    };
    let (a, b) = tokio::join!(sample(one.clone()), sample(two.clone()));
    let all: Vec<i64> = a.iter().chain(&b).copied().collect();
    let periods: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(
        all.len(),
        periods.len(),
        "a period taken twice: {a:?} {b:?}"
    );
    assert!(periods.len() >= 3, "{periods:?}");
    let history = one
        .flow_history("flow_idle", Duration::from_secs(3600))
        .await
        .unwrap();
    let kept: Vec<i64> = history.iter().map(|s| s.at).collect();
    let last = *periods.last().unwrap();
    // Written while pruning what is older than 2 s: at most the last 3 periods remain.
    assert!(kept.iter().all(|at| periods.contains(at)), "{kept:?}");
    assert!(
        kept.iter().all(|&at| at >= last - 3_000),
        "{kept:?} {periods:?}"
    );
    assert!(!kept.contains(periods.first().unwrap()), "{kept:?}");
    assert!(kept.contains(&last), "{kept:?}");
    assert!(history.iter().all(|s| s.due == 1 && s.waiting == 1));
    one.shutdown().await.unwrap();
    two.shutdown().await.unwrap();
}

/// The queues pages and the API: hostile names are escaped, unknown names are 404s that
/// say where the queues are listed.
async fn queue_pages_escape_names_and_refuse_unknown_ones<DB: Backend>(db: TestDb) {
    let rt = db.builder().run_workers(false).start().await.unwrap();
    hostile(1).on(&rt).await.unwrap();
    hostile(2)
        .partition(HOSTILE_PARTITION)
        .on(&rt)
        .await
        .unwrap();
    let listed = rt.queues_flow().await.unwrap();
    let queue = listed.iter().find(|q| q.queue == HOSTILE).unwrap();
    assert_eq!((queue.due, queue.verdict), (2, Verdict::Backlogged));
    #[cfg(feature = "console")]
    pages(&rt).await;
    rt.shutdown().await.unwrap();
}

/// The console's part: the pages and the JSON API.
#[cfg(feature = "console")]
async fn pages(rt: &Runtime) {
    use common::console::{get, login, mounted, Auth, VIEWER_TOKEN};
    let app = mounted(rt);
    let (cookie, _) = login(&app, "victor", "viewer pass").await;
    let viewer = Auth::Cookie(&cookie);
    let list = get(&app, "/queues", viewer).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(!list.body.contains("<script>alert"), "{}", list.body);
    assert!(list.body.contains("q&lt;script&gt;alert"), "{}", list.body);
    assert!(
        list.body.contains("data-verdict=\"backlogged\""),
        "{}",
        list.body
    );
    let encoded = serde_urlencoded::to_string([("", HOSTILE)]).unwrap();
    let path = format!("/queues/{}", encoded.trim_start_matches('='));
    let page = get(&app, &path, viewer).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    assert!(page.body.contains("id=\"flow-history\""), "{}", page.body);
    assert!(!page.body.contains("<img src=x"), "{}", page.body);
    assert!(page.body.contains("&lt;img src=x"), "{}", page.body);
    let unknown = get(&app, "/queues/%3Cb%3Enope", viewer).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(!unknown.body.contains("<b>nope"), "{}", unknown.body);
    assert!(
        unknown.body.contains("queues page lists them"),
        "{}",
        unknown.body
    );
    let bearer = Auth::Bearer(VIEWER_TOKEN);
    let api = get(&app, "/api/queues", bearer).await;
    assert_eq!(api.status, 200, "{}", api.body);
    assert!(api
        .json()
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["queue"] == HOSTILE));
    let history = get(&app, "/api/queues/nope/history", bearer).await;
    assert_eq!(history.status, 404, "{}", history.body);
    assert!(
        history.body.contains("GET api/queues lists them"),
        "{}",
        history.body
    );
    let odd = get(&app, "/api/queues/flow_idle/history?bogus=1", bearer).await;
    assert_eq!(odd.status, 400, "{}", odd.body);
    let fine = get(&app, "/api/queues/flow_idle/history?seconds=60", bearer).await;
    assert_eq!(fine.status, 200, "{}", fine.body);
    let anonymous = get(&app, "/api/queues", Auth::None).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
}

backend_suite!(
    a_queue_at_its_limit_with_a_backlog_reads_limit_working,
    a_paused_or_unserved_queue_reads_stuck,
    the_history_is_written_once_per_period_and_bounded,
    queue_pages_escape_names_and_refuse_unknown_ones,
);
