//! Unit tests of the parse of `#[async_exec(...)]`'s arguments.

use super::values::{timeout_millis, MAX_TIMEOUT_MS};
use super::*;
use quote::ToTokens;

fn parse(tokens: &str) -> syn::Result<Args> {
    syn::parse_str::<Args>(tokens)
}

fn messages(tokens: &str) -> Vec<String> {
    parse(tokens)
        .expect_err("expected an error")
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn deadline_is_parsed_and_checked() {
    let args = parse(r#"type = SaveAsync, deadline = "10m""#).unwrap();
    assert_eq!(args.deadline_ms.map(|(ms, _)| ms), Some(600_000));
    let args = parse("type = SaveAsync, deadline = 30").unwrap();
    assert_eq!(args.deadline_ms.map(|(ms, _)| ms), Some(30_000));
    assert!(messages(r#"type = Async, deadline = "1m""#)[0].contains("type = SaveAsync"));
    for bad in [r#""0s""#, r#""soon""#, "0", r#""9000h""#] {
        let errs = messages(&format!("type = SaveAsync, deadline = {bad}"));
        assert!(errs[0].contains("`deadline` must be"), "{bad}: {errs:?}");
    }
    assert!(
        messages(r#"type = SaveAsync, deadline = "1m", deadline = "2m""#)[0].contains("deadline")
    );
}

#[test]
fn queue_is_parsed_and_checked() {
    let args = parse(r#"type = SaveAsync, queue = "payments""#).unwrap();
    assert_eq!(args.queue.unwrap().value(), "payments");
    assert!(messages(r#"type = Async, queue = "payments""#)[0]
        .contains("`Async` does not go through a claim"));
    assert!(messages(r#"type = SyncSave, queue = "p""#)[0].contains("type = SaveAsync"));
    assert!(messages(r#"type = AsyncSave, queue = "p""#)[0].contains("`AsyncSave` does not"));
    for bad in ["", " payments", "a\tb"] {
        let errs = messages(&format!("type = SaveAsync, queue = {bad:?}"));
        assert!(
            errs[0].contains("`queue` must be 1 to 100 characters"),
            "{errs:?}"
        );
    }
    let long = "q".repeat(101);
    assert!(messages(&format!("type = SaveAsync, queue = {long:?}"))[0].contains("100"));
}

#[test]
fn partition_is_parsed_and_checked() {
    let args = parse(r#"type = SaveAsync, queue = "webhooks", partition = tenant_id"#).unwrap();
    assert_eq!(
        args.partition.unwrap().to_token_stream().to_string(),
        "tenant_id"
    );
    // Any expression, up to the next comma outside brackets.
    let args = parse(
        r#"partition = format!("{}-{}", order.region, tenant), queue = "q", type = SaveAsync"#,
    )
    .unwrap();
    assert_eq!(
        args.partition.unwrap().to_token_stream().to_string(),
        r#"format ! ("{}-{}" , order . region , tenant)"#
    );
    assert!(parse(r#"type = SaveAsync, queue = "q""#)
        .unwrap()
        .partition
        .is_none());
    // Only a queue's requests have a partition, and only SaveAsync ones are claimed.
    let errs = messages(r#"type = SaveAsync, partition = tenant_id"#);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains("name the queue, e.g."), "{errs:?}");
    for strategy in ["SyncSave", "AsyncSave", "Async", "Thread"] {
        let errs = messages(&format!(
            r#"type = {strategy}, partition = tenant_id, queue = "q""#
        ));
        // The queue's error and the partition's, each saying why.
        assert!(
            errs.iter()
                .any(|e| e.contains(&format!("`{strategy}` writes no request to claim"))),
            "{errs:?}"
        );
    }
    let errs = messages(r#"type = SaveAsync, queue = "q", every = "1m", partition = region()"#);
    assert!(
        errs[0].contains("a schedule's ticks are written by the schedule"),
        "{errs:?}"
    );
    // A string is surely a parameter's name: the fix names it.
    let errs = messages(r#"type = SaveAsync, queue = "q", partition = "tenant_id""#);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].ends_with(
            r#"write e.g. partition = tenant_id or partition = format!("tenant-{tenant_id}")"#
        ),
        "{errs:?}"
    );
    assert!(
        messages(r#"type = SaveAsync, queue = "q", partition = "eu west""#)[0]
            .contains("partition = tenant_id or")
    );
    let errs = messages(r#"type = SaveAsync, queue = "q", partition = a, partition = b"#);
    assert_eq!(errs, ["duplicate argument `partition`; give it only once"]);
    // A partition that is not an expression stops the parse there.
    assert!(parse(r#"type = SaveAsync, queue = "q", partition = "#).is_err());
}

#[test]
fn minimal() {
    let args = parse("type = SaveAsync").unwrap();
    assert_eq!(args.strategy, "SaveAsync");
    assert!(args.remark.is_none() && args.name.is_none() && args.crate_path.is_none());
    assert_eq!((args.max_attempts, args.timeout_ms), (None, None));
}

#[test]
fn all_keys_any_order_trailing_comma() {
    let args = parse(
        r#"remark = "send mail", name = "mail.welcome", max_attempts = 3,
           timeout = "2m", crate = "::my_facade", type = Thread,"#,
    )
    .unwrap();
    assert_eq!(args.strategy, "Thread");
    assert_eq!(args.remark.unwrap().value(), "send mail");
    assert_eq!(args.name.unwrap().value(), "mail.welcome");
    assert_eq!(args.max_attempts, Some(3));
    assert_eq!(args.timeout_ms, Some(120_000));
    let path = args.crate_path.unwrap();
    assert!(path.leading_colon.is_some());
    assert_eq!(path.segments[0].ident, "my_facade");
}

#[test]
fn every_strategy() {
    for s in STRATEGIES {
        assert_eq!(parse(&format!("type = {s}")).unwrap().strategy, s);
    }
}

#[test]
fn timeouts() {
    assert_eq!(
        parse("type = Async, timeout = 30").unwrap().timeout_ms,
        Some(30_000)
    );
    assert_eq!(timeout_millis("250ms"), Some(250));
    assert_eq!(timeout_millis("30s"), Some(30_000));
    assert_eq!(timeout_millis("5m"), Some(300_000));
    assert_eq!(timeout_millis("2h"), Some(7_200_000));
    assert_eq!(timeout_millis("8784h"), Some(MAX_TIMEOUT_MS));
    assert_eq!(timeout_millis("8785h"), None, "over a year");
    for bad in [
        "0s",
        "0",
        "30",
        "s",
        "1.5s",
        "-1s",
        " 1s",
        "1 s",
        "1d",
        "",
        "99999999999999999h",
    ] {
        assert_eq!(timeout_millis(bad), None, "{bad:?}");
    }
    let errs = messages("type = Async, timeout = 0");
    assert!(errs[0].contains("\"<n>ms\""), "{errs:?}");
    let errs = messages("type = Async, timeout = \"3 days\"");
    assert!(errs[0].starts_with("`timeout` must be"), "{errs:?}");
}

#[test]
fn missing_type() {
    assert_eq!(
        messages("remark = \"x\""),
        ["missing `type = ...`; write e.g. #[async_exec(type = SaveAsync)]"]
    );
    assert_eq!(messages("").len(), 1);
}

#[test]
fn unknown_strategy() {
    assert_eq!(
        messages("type = Later"),
        ["unknown strategy `Later`; expected one of: SaveAsync, SyncSave, AsyncSave, Async, Thread"]
    );
}

#[test]
fn unknown_and_case_sensitive_keys() {
    assert_eq!(
        messages("type = Async, foo = 1 + 2, remark = \"x\""),
        ["unknown argument `foo`; expected one of: type, remark, name, max_attempts, timeout, queue, partition, deadline, every, cron, catch_up, time_zone, unique_for, debounce, debounce_edge, crate"]
    );
    let errs = messages("Type = Async");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].ends_with("(keys are case-sensitive: write `type`)"),
        "{errs:?}"
    );
    assert!(errs[1].starts_with("missing `type"), "{errs:?}");
}

#[test]
fn duplicates_reported_at_second() {
    let errs = messages("type = Async, type = Thread");
    assert_eq!(errs, ["duplicate argument `type`; give it only once"]);
    let errs = messages("type = Async, remark = \"a\", remark = \"b\"");
    assert_eq!(errs, ["duplicate argument `remark`; give it only once"]);
    // A rejected value still counts as given.
    let errs = messages("type = Async, max_attempts = 0, max_attempts = 2");
    assert_eq!(errs.len(), 2, "{errs:?}");
}

#[test]
fn bad_values() {
    assert!(messages("type = Async, max_attempts = 0")[0].contains("max_attempts = 5"));
    assert!(messages("type = Async, name = \"\"")[0].contains("must not be empty"));
    assert!(
        messages("type = Async, crate = \"not a path\"")[0].contains("crate = \"::async_exec\"")
    );
}

#[test]
fn crate_path_is_found_in_bad_arguments() {
    let args: proc_macro2::TokenStream =
        syn::parse_str(r#"type = Nope, crate = "::facade""#).unwrap();
    let path = find_crate_path(&args).unwrap();
    assert_eq!(path.segments[0].ident, "facade");
    assert!(find_crate_path(&syn::parse_str("type = Nope").unwrap()).is_none());
}

#[test]
fn errors_are_collected() {
    let errs = messages("type = Nope, foo = 1, timeout = \"1d\", max_attempts = 0");
    assert_eq!(errs.len(), 4, "{errs:?}");
}

#[test]
fn syntax_errors_keep_earlier_errors() {
    let errs = messages("foo = 1, type SaveAsync");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[1].contains("expected `=`"), "{errs:?}");
    let errs = messages("42");
    assert!(errs[0].starts_with("expected one of"), "{errs:?}");
}

#[test]
fn modes_are_parsed_and_checked() {
    let args = parse(r#"type = SaveAsync, unique_for = "1h""#).unwrap();
    assert_eq!(args.unique_for_ms.map(|(ms, _)| ms), Some(3_600_000));
    let args = parse(r#"type = SaveAsync, queue = "index", partition = account, debounce = "5s""#)
        .unwrap();
    assert_eq!(args.debounce_ms.map(|(ms, _)| ms), Some(5_000));
    assert!(args.debounce_leading.is_none());
    let args = parse(r#"type = SaveAsync, debounce = 2, debounce_edge = "leading""#).unwrap();
    assert_eq!(args.debounce_ms.map(|(ms, _)| ms), Some(2_000));
    assert_eq!(
        args.debounce_leading.map(|(leading, _)| leading),
        Some(true)
    );
    // A trailing debounce needs a queue's claim to wait for its window.
    assert!(messages(r#"type = SaveAsync, debounce = "5s""#)[0].contains("name the queue"));
    assert!(messages(r#"type = Async, unique_for = "1h""#)[0].contains("use type = SaveAsync"));
    assert!(
        messages(r#"type = SaveAsync, debounce_edge = "leading""#)[0]
            .contains("give it with `debounce")
    );
    assert!(
        messages(r#"type = SaveAsync, debounce = 1, debounce_edge = "middle""#)[0]
            .contains("\"trailing\"")
    );
    assert!(messages(
        r#"type = SaveAsync, unique_for = "1h", debounce = 1, debounce_edge = "leading""#
    )[0]
    .contains("give one"));
    for bad in [r#""0s""#, r#""soon""#, "0"] {
        let errs = messages(&format!("type = SaveAsync, unique_for = {bad}"));
        assert!(errs[0].contains("`unique_for` must be"), "{bad}: {errs:?}");
    }
}
