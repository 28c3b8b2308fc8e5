//! Issue 9: one way to ask "which requests", with one meaning on every backend. The same
//! rows (mixed case, `%`, `_`, backslashes, quotes, a NUL, emoji, combining accents,
//! trailing spaces, three applications whose names differ by case and a space) are asked
//! for with the same [`RequestQuery`]s on SQLite, PostgreSQL and MariaDB: each answer,
//! its count and its pages, newest and oldest first, must be what the documented rules
//! say, computed here in Rust from the stored rows. Pages are in id order; a time range
//! is found through ids, so it is also checked on rows whose creation times are out of
//! id order (a call in a transaction scope is written at its commit; clocks differ).
#![allow(clippy::extra_unused_type_parameters)] // every test takes the backend, used or not

#[macro_use]
mod common;

use std::time::Duration;

use async_exec::{
    async_exec, Backend, Cursor, Final, Order, PageSpec, Request, RequestQuery, Runtime, Status,
};
use common::TestDb;

const PLAIN_REMARK: &str = "Plain Remark";
const ODD_REMARK: &str = "50% off_sale 'single' \"double\" \\ 🎉 e\u{301}";

#[async_exec(type = SaveAsync, name = "filters::fails", max_attempts = 1, remark = "Plain Remark")]
async fn fails(message: String) -> Result<(), Final> {
    Err(Final::new(message))
}

#[async_exec(
    type = SaveAsync,
    name = "filters::odd",
    max_attempts = 1,
    remark = "50% off_sale 'single' \"double\" \\ 🎉 e\u{301}"
)]
async fn odd(message: String) -> Result<(), Final> {
    Err(Final::new(message))
}

#[async_exec(type = SaveAsync, name = "filters::waits", remark = "waits")]
async fn waits(n: i64) {
    let _ = n;
}

/// The last errors of the requests that fail (`filters::fails`).
const ERRORS: [&str; 11] = [
    "Boom: Timeout after 30s",
    "boom: timeout after 30s",
    "100% done_ok",
    "100x done-ok",
    "path C:\\temp\\new",
    "it's \"quoted\"",
    "nul\0byte",
    "🎉 party e\u{301}",
    "caf\u{e9}",
    "\u{202e}rtl\u{200f}",
    "trailing space ",
];

/// The keys of the waiting requests.
const KEYS: [&str; 4] = ["Key-A", "key-a", "k%_\\'\"🎉", "trail "];

/// The filter's rules, in Rust: what every backend must answer.
fn matches(r: &Request, q: &RequestQuery) -> bool {
    let clean = |t: &str| t.replace('\0', "\u{FFFD}");
    let app = q.application.as_deref().unwrap_or("tests");
    r.application_name == clean(app)
        && q.status.map_or(true, |s| r.status == s)
        && q.executor
            .as_deref()
            .map_or(true, |e| r.executor == clean(e))
        && q.key.as_deref().map_or(true, |k| {
            r.idempotency_key.as_deref() == Some(clean(k).as_str())
        })
        && q.id.map_or(true, |id| r.id == id)
        && q.remark
            .as_deref()
            .map_or(true, |t| r.remark.contains(&clean(t)))
        && q.error.as_deref().map_or(true, |t| {
            r.last_error
                .as_deref()
                .is_some_and(|e| e.contains(&clean(t)))
        })
        && q.created_from.map_or(true, |from| r.create_time >= from)
        && q.created_to.map_or(true, |to| r.create_time < to)
}

/// The ids `q` should find, newest first (by id: the order requests were written in).
fn expected(rows: &[Request], q: &RequestQuery) -> Vec<i64> {
    let mut found: Vec<i64> = rows
        .iter()
        .filter(|r| matches(r, q))
        .map(|r| r.id)
        .collect();
    found.sort_unstable_by_key(|id| std::cmp::Reverse(*id));
    found
}

/// Every page of `q` in `order`, `limit` at a time, following `next`.
async fn pages(rt: &Runtime, q: &RequestQuery, order: Order, limit: i64) -> Vec<i64> {
    let spec = PageSpec::default().order(order).limit(limit);
    windowed_pages(rt, q, spec).await.0
}

/// Every page of `q` as `spec` asks, following `next`: the ids, and each page's cursor
/// before, its `next` and its `searched`.
async fn windowed_pages(
    rt: &Runtime,
    q: &RequestQuery,
    mut spec: PageSpec,
) -> (Vec<i64>, Vec<PageSeen>) {
    let mut ids = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let page = rt.list(q, &spec).await.unwrap();
        assert!(page.requests.len() as i64 <= spec.limit);
        ids.extend(page.requests.iter().map(|r| r.id));
        seen.push(PageSeen {
            after: spec.after,
            found: page.requests.len(),
            next: page.next,
            searched: page.searched,
        });
        match page.next {
            Some(next) => spec = spec.after(next),
            None => return (ids, seen),
        }
    }
    panic!("more than 1,000 pages of {q:?}");
}

/// What one page said.
#[derive(Debug)]
struct PageSeen {
    after: Option<Cursor>,
    found: usize,
    next: Option<Cursor>,
    searched: Option<i64>,
}

/// The rows, one in a few milliseconds (so that time ranges cut between them) but some
/// in the same millisecond (so that pages cut between equal creation times).
async fn fill(db: &TestDb, rt: &Runtime) -> Vec<Request> {
    let mut ids = Vec::new();
    for (i, message) in ERRORS.iter().enumerate() {
        ids.push(fails(message.to_string()).on(rt).await.unwrap().id.unwrap());
        if i % 3 != 0 {
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    for message in ["odd Boom", "odd 50%"] {
        ids.push(odd(message.into()).on(rt).await.unwrap().id.unwrap());
    }
    for (i, key) in KEYS.iter().enumerate() {
        let call = waits(i as i64).key(*key).delay(Duration::from_secs(3600));
        ids.push(call.on(rt).await.unwrap().id.unwrap());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let unkeyed = waits(9).delay(Duration::from_secs(3600));
    ids.push(unkeyed.on(rt).await.unwrap().id.unwrap());
    let dead = ERRORS.len() + 2;
    common::wait_for(|| async {
        let mut n = 0;
        for id in &ids {
            n += (rt.get(*id).await.unwrap().unwrap().status == Status::Dead) as usize;
        }
        n == dead
    })
    .await;
    let mut rows = Vec::new();
    for id in ids {
        rows.push(rt.get(id).await.unwrap().unwrap());
    }
    // Applications whose names differ from `tests` by case or a trailing space (delayed:
    // MariaDB's claims compare names padded with spaces, and would run `tests `'s).
    for (app, n) in [("tests ", 2), ("Tests", 1)] {
        let other = db
            .builder()
            .application_name(app)
            .run_workers(false)
            .start()
            .await
            .unwrap();
        for i in 0..n {
            let call = waits(i).delay(Duration::from_secs(3600));
            let id = call.on(&other).await.unwrap().id.unwrap();
            rows.push(other.get(id).await.unwrap().unwrap());
        }
        other.shutdown().await.unwrap();
    }
    rows
}

async fn the_same_rows_match_the_same_filters_on_every_backend<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let rows = fill(&db, &rt).await;
    for remark in [PLAIN_REMARK, ODD_REMARK] {
        assert!(rows.iter().any(|r| r.remark == remark), "{remark:?} stored");
    }
    let q = RequestQuery::default;
    let mut times: Vec<i64> = rows.iter().map(|r| r.create_time).collect();
    times.sort_unstable();
    let (t1, t2) = (times[times.len() / 4], times[times.len() * 3 / 4]);
    assert!(t1 < t2, "the rows span some milliseconds: {times:?}");

    let mut queries = vec![
        q(),
        q().status(Status::Dead),
        q().status(Status::Init),
        q().executor("filters::fails"),
        q().executor("filters::FAILS"),
        q().executor("filters::%"),
        q().executor("filters::fails "),
        q().application("tests"),
        q().application("tests "),
        q().application("Tests"),
        q().application("TESTS"),
        q().application("test"),
        q().application("tests\0"),
        q().id(rows[3].id),
        q().id(rows[3].id).status(Status::Init),
        q().created_between(Some(t1), None),
        q().created_between(None, Some(t1)),
        q().created_between(Some(t1), Some(t2)),
        q().created_between(Some(t2), Some(t1)),
        q().status(Status::Dead).error_contains("boom"),
        q().executor("filters::odd").error_contains("Boom"),
        q().error_contains("o").created_between(Some(t1), Some(t2)),
    ];
    for key in KEYS
        .iter()
        .chain(&["KEY-A", "%", "k%", "_", "trail", "trail  ", ""])
    {
        queries.push(q().key(*key));
    }
    for needle in [
        "Boom",
        "boom",
        "BOOM",
        "Timeout",
        "timeout",
        "%",
        "_",
        "100%",
        "0% d",
        "%%",
        "_o",
        "\\",
        "\\t",
        "C:\\temp",
        "'",
        "\"",
        "it's",
        "' OR 1=1 --",
        "nul\0byte",
        "nul\u{FFFD}byte",
        "\0",
        "🎉",
        "e\u{301}",
        "\u{301}",
        "é",
        "\u{e9}",
        "caf",
        "CAF",
        "\u{202e}",
        "\u{200f}",
        "space ",
        "space  ",
        "",
        "o",
    ] {
        queries.push(q().error_contains(needle));
    }
    for needle in [
        "Plain",
        "plain",
        "Remark",
        "%",
        "_",
        "50% off_",
        "0%_",
        "\\",
        "'single'",
        "\"double\"",
        "🎉",
        "e\u{301}",
        "\u{e9}",
        "WAITS",
        "",
    ] {
        queries.push(q().remark_contains(needle));
    }

    for query in &queries {
        let want = expected(&rows, query);
        let page = rt
            .list(query, &PageSpec::default().limit(PageSpec::MAX_LIMIT))
            .await
            .unwrap();
        let got: Vec<i64> = page.requests.iter().map(|r| r.id).collect();
        assert_eq!(got, want, "{query:?}");
        assert_eq!(page.next, None, "{query:?}: one page holds them all");
        let count = rt.count_matching(query).await.unwrap();
        assert_eq!(count, want.len() as i64, "count of {query:?}");
    }

    // The rules are not vacuous: what some of them find, by hand.
    let n = |query: RequestQuery| expected(&rows, &query).len();
    assert_eq!(n(q()), ERRORS.len() + 2 + KEYS.len() + 1);
    assert_eq!(n(q().error_contains("Boom")), 2, "`Boom: ...`, `odd Boom`");
    assert_eq!(n(q().error_contains("BOOM")), 0, "case counts");
    assert_eq!(n(q().error_contains("%")), 2, "`100% done_ok`, `odd 50%`");
    assert_eq!(n(q().error_contains("_")), 1, "`_` is no wildcard");
    assert_eq!(
        n(q().error_contains("nul\0byte")),
        1,
        "a NUL finds its U+FFFD"
    );
    assert_eq!(n(q().error_contains("e\u{301}")), 1, "the combining accent");
    assert_eq!(n(q().error_contains("\u{e9}")), 1, "the precomposed é only");
    assert_eq!(n(q().error_contains("\\")), 1);
    assert_eq!(n(q().remark_contains("plain")), 0, "case counts");
    assert_eq!(n(q().remark_contains("%")), 2);
    assert_eq!(n(q().key("Key-A")), 1);
    assert_eq!(n(q().key("trail")), 0, "keys compare exactly");
    assert_eq!(n(q().application("tests ")), 2, "a trailing space counts");
    assert_eq!(n(q().application("Tests")), 1);
    assert_eq!(n(q().executor("filters::fails ")), 0);

    // Keyset pages, both ways, small enough to cut between equal creation times: every
    // match once, in order, no gaps.
    for query in [
        q(),
        q().status(Status::Dead),
        q().error_contains("o"),
        q().error_contains("o").created_between(Some(t1), Some(t2)),
        q().key("Key-A"),
        q().application("tests "),
    ] {
        let newest = expected(&rows, &query);
        let mut oldest = newest.clone();
        oldest.reverse();
        for limit in [1, 2, 3] {
            let down = pages(&rt, &query, Order::Newest, limit).await;
            assert_eq!(down, newest, "{query:?}, newest first, {limit} a page");
            let up = pages(&rt, &query, Order::Oldest, limit).await;
            assert_eq!(up, oldest, "{query:?}, oldest first, {limit} a page");
        }
    }
    // A page after a request's cursor starts right after it, in either order.
    let newest = expected(&rows, &q());
    let at = rows.iter().find(|r| r.id == newest[5]).unwrap();
    let after = PageSpec::default().after(Cursor::of(at)).limit(3);
    let page = rt.list(&q(), &after).await.unwrap();
    let got: Vec<i64> = page.requests.iter().map(|r| r.id).collect();
    assert_eq!(got, newest[6..9]);
    let page = rt.list(&q(), &after.order(Order::Oldest)).await.unwrap();
    let got: Vec<i64> = page.requests.iter().map(|r| r.id).collect();
    assert_eq!(got, [newest[4], newest[3], newest[2]]);
    rt.shutdown().await.unwrap();
}

/// A page with a text filter looks at no more than its search window of the requests
/// that match the other fields; one that ends there before it fills says so, and its
/// `next` continues from the last request it looked at: following the pages finds every
/// match once, in order, in either direction.
async fn a_text_search_page_looks_at_its_window_and_continues<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let rows = fill(&db, &rt).await;
    let q = RequestQuery::default;
    for query in [
        q().error_contains("o"),
        q().error_contains("\u{e9}"),
        q().error_contains("BOOM"),
        q().status(Status::Dead).error_contains("boom"),
        q().remark_contains("Plain"),
        q().remark_contains("🎉").error_contains("50%"),
    ] {
        let mut others = query.clone();
        (others.remark, others.error) = (None, None);
        for order in [Order::Newest, Order::Oldest] {
            let mut want = expected(&rows, &query);
            let mut scanned = expected(&rows, &others);
            if order == Order::Oldest {
                want.reverse();
                scanned.reverse();
            }
            let key = |id: i64| {
                let r = rows.iter().find(|r| r.id == id).unwrap();
                Cursor::of(r)
            };
            let position = |cursor: Option<Cursor>| {
                cursor.map_or(0, |c| {
                    scanned.iter().position(|id| key(*id) == c).unwrap() + 1
                })
            };
            for window in [1, 2, 5, 100] {
                for limit in [1, 3] {
                    let spec = PageSpec::default()
                        .order(order)
                        .limit(limit)
                        .search_window(window);
                    let (ids, seen) = windowed_pages(&rt, &query, spec).await;
                    let label = format!("{query:?} {order:?} window {window} limit {limit}");
                    assert_eq!(ids, want, "{label}: {seen:?}");
                    for page in &seen {
                        let (from, to) = (position(page.after), position(page.next));
                        if page.next.is_some() {
                            assert!(
                                to - from <= window as usize,
                                "{label}: a page looked at {} requests: {page:?}",
                                to - from
                            );
                        }
                        match page.searched {
                            Some(n) => {
                                assert_eq!(n, window, "{label}");
                                assert!(page.found < limit as usize, "{label}: {page:?}");
                                assert_eq!(to - from, window as usize, "{label}: {page:?}");
                            }
                            None if page.next.is_some() => {
                                assert_eq!(page.found, limit as usize, "{label}: {page:?}")
                            }
                            None => {}
                        }
                    }
                    if want.len() < scanned.len() && window == 1 {
                        assert!(
                            seen.iter().any(|p| p.searched.is_some()),
                            "{label}: some page ends at its window: {seen:?}"
                        );
                    }
                }
            }
        }
    }
    // Without a text filter there is no window: full pages.
    let spec = PageSpec::default().limit(4).search_window(1);
    let page = rt.list(&q(), &spec).await.unwrap();
    assert_eq!((page.requests.len(), page.searched), (4, None));
    for window in [0, -1, PageSpec::MAX_SEARCH_WINDOW + 1] {
        let refused = rt
            .list(&q().error_contains("o"), &spec.search_window(window))
            .await;
        assert!(
            matches!(&refused, Err(async_exec::Error::InvalidFilter(m)) if m.contains("search window")),
            "{window}: {refused:?}"
        );
    }
    rt.shutdown().await.unwrap();
}

/// The creation times `shuffle` gives the rows, by position in id order: out of id
/// order both ways, finished and waiting records alike, with ties.
fn shuffled_times(base: i64, n: usize) -> Vec<i64> {
    (0..n)
        .map(|i| match i % 4 {
            // The newest ids get the oldest times and the oldest ids the newest.
            0 => base + (n - i) as i64 * 10,
            1 => base + i as i64 * 10,
            2 => base + 5,
            _ => base + ((i * 7) % n) as i64 * 10 + 3,
        })
        .collect()
}

/// A time range is exact whatever order creation times are in against ids: every
/// window between two of the rows' times (and open at either end), with and without a
/// status, a text and a cursor, answers what the rules say, in id order, in pages both
/// ways.
async fn a_time_range_is_exact_when_times_are_out_of_id_order<DB: Backend>(db: TestDb) {
    let rt = db.builder().start().await.unwrap();
    let mut rows = fill(&db, &rt).await;
    rows.sort_by_key(|r| r.id);
    let base = rows[0].create_time - 1_000_000;
    for (row, time) in rows.iter().zip(shuffled_times(base, rows.len())) {
        db.exec(&format!(
            "UPDATE async_req SET create_time = {time} WHERE id = {}",
            row.id
        ))
        .await;
    }
    let mut fresh = Vec::new();
    for row in &rows {
        let app = row.application_name.clone();
        let found = rt
            .list(
                &RequestQuery::default().application(app).id(row.id),
                &PageSpec::default(),
            )
            .await
            .unwrap();
        fresh.extend(found.requests);
    }
    assert_eq!(fresh.len(), rows.len());
    let rows = fresh;
    let by_id: Vec<i64> = rows.iter().map(|r| r.create_time).collect();
    let mut by_time = by_id.clone();
    by_time.sort_unstable();
    assert_ne!(by_id, by_time, "the times are out of id order");
    let mut cuts: Vec<Option<i64>> = by_time.iter().map(|t| Some(*t)).collect();
    cuts.dedup();
    cuts.push(Some(base + 1_000_000_000));
    cuts.push(None);
    let q = RequestQuery::default;
    let mut checked = 0;
    for (i, from) in cuts.iter().enumerate() {
        for to in cuts.iter().skip(i.saturating_sub(1)).step_by(2) {
            for query in [
                q().created_between(*from, *to),
                q().created_between(*from, *to).status(Status::Dead),
                q().created_between(*from, *to).status(Status::Init),
                q().created_between(*from, *to).error_contains("o"),
                q().created_between(*from, *to).executor("filters::waits"),
            ] {
                let want = expected(&rows, &query);
                let page = rt
                    .list(&query, &PageSpec::default().limit(PageSpec::MAX_LIMIT))
                    .await
                    .unwrap();
                let got: Vec<i64> = page.requests.iter().map(|r| r.id).collect();
                assert_eq!(got, want, "{query:?}");
                let count = rt.count_matching(&query).await.unwrap();
                assert_eq!(count, want.len() as i64, "count of {query:?}");
                checked += usize::from(!want.is_empty());
            }
        }
    }
    assert!(checked > 50, "the windows find something: {checked}");
    // Pages, both ways, across the middle of the range.
    let (from, to) = (by_time[2], by_time[by_time.len() - 3]);
    for query in [
        q().created_between(Some(from), Some(to)),
        q().created_between(Some(from), None),
        q().created_between(None, Some(to)).error_contains("o"),
    ] {
        let newest = expected(&rows, &query);
        let mut oldest = newest.clone();
        oldest.reverse();
        assert!(newest.len() > 3, "{query:?}: {newest:?}");
        for limit in [1, 2, 5] {
            let down = pages(&rt, &query, Order::Newest, limit).await;
            assert_eq!(down, newest, "{query:?}, newest first, {limit} a page");
            let up = pages(&rt, &query, Order::Oldest, limit).await;
            assert_eq!(up, oldest, "{query:?}, oldest first, {limit} a page");
        }
    }
    rt.shutdown().await.unwrap();
}

backend_suite!(
    the_same_rows_match_the_same_filters_on_every_backend,
    a_text_search_page_looks_at_its_window_and_continues,
    a_time_range_is_exact_when_times_are_out_of_id_order,
);
