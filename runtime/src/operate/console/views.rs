//! What every page shares: the layout with its navigation, times and durations for
//! people, status badges. HTML is written with maud, which escapes every value.

use std::time::{Duration, UNIX_EPOCH};

use maud::{html, Markup, DOCTYPE};

use super::auth::Who;
use super::config::Role;
use crate::base::query::Action;
use crate::base::record::Status;

/// A page: the navigation (for a logged-in visitor), a title and the body.
pub(crate) fn layout(base: &str, who: Option<&Who>, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · async-exec console" }
                link rel="stylesheet" href={ (base) "/assets/console.css" };
                script src={ (base) "/assets/console.js" } defer {}
            }
            body {
                @if let Some(who) = who {
                    nav {
                        a.brand href=(home(base)) { "async-exec" }
                        a id="nav-overview" href=(home(base)) { "Overview" }
                        a id="nav-requests" href={ (base) "/requests" } { "Requests" }
                        a id="nav-executors" href={ (base) "/executors" } { "Executors" }
                        a id="nav-instances" href={ (base) "/instances" } { "Instances" }
                        a id="nav-queues" href={ (base) "/queues" } { "Queues" }
                        a id="nav-policies" href={ (base) "/policies" } { "Policies" }
                        a id="nav-audit" href={ (base) "/audit" } { "Audit" }
                        span.who id="who" data-role=(who.role.as_str()) {
                            (who.name) " · " (who.role.as_str())
                        }
                        form.inline method="post" action={ (base) "/logout" } {
                            (csrf_field(who))
                            button id="logout" type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// Marks a page as one that refreshes itself every `seconds` while open (the console's
/// script; without it the page stays as it is).
pub(crate) fn refreshing(seconds: u32) -> Markup {
    html! { span.refresh hidden data-refresh=(seconds) {} }
}

/// The overview's address: the mount path itself (`/console`; axum routes `/console/`
/// elsewhere), or `/` at the root.
pub(crate) fn home(base: &str) -> &str {
    if base.is_empty() {
        "/"
    } else {
        base
    }
}

/// The hidden CSRF field of a state-changing form.
pub(crate) fn csrf_field(who: &Who) -> Markup {
    html! { input type="hidden" name="csrf" value=(who.csrf.as_deref().unwrap_or("")); }
}

/// Whether the visitor may act.
pub(crate) fn can_act(who: &Who) -> bool {
    who.role == Role::Operator
}

/// A unix-ms time, RFC 3339 in UTC to the second.
pub(crate) fn time(ms: i64) -> String {
    if ms <= 0 {
        return "—".into();
    }
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string()
}

/// A unix-ms time as a `<time>` element, `2026-12-02 04:17:06 UTC`; `—` for none.
pub(crate) fn time_el(ms: i64) -> Markup {
    if ms <= 0 {
        return html! { "—" };
    }
    let text = time(ms);
    html! { time datetime=(text) { (text.replace('T', " ").trim_end_matches('Z')) " UTC" } }
}

/// `n` and `noun`, plural when `n` is not 1: `1 request`, `3 requests`.
pub(crate) fn count_of(n: i64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

/// A span of milliseconds, rounded for people: milliseconds under a second (`<1ms` for
/// none: times are whole milliseconds), seconds and milliseconds under a minute, whole
/// seconds above.
pub(crate) fn span(ms: i64) -> String {
    let ms = ms.max(0) as u64;
    match ms {
        0 => "<1ms".into(),
        1..=999 => format!("{ms}ms"),
        1000..=59_999 => humantime::format_duration(Duration::from_millis(ms)).to_string(),
        _ => humantime::format_duration(Duration::from_secs(ms / 1000)).to_string(),
    }
}

/// `text` with its bidirectional controls (U+202A-U+202E, U+2066-U+2069) shown as
/// `⟦U+202E⟧` instead of obeyed: a key or an error must not reorder what follows it.
pub(crate) fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    let is_bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(is_bidi) {
        return text.into();
    }
    text.chars()
        .map(|c| match is_bidi(c) {
            true => format!("⟦U+{:04X}⟧", c as u32),
            false => c.to_string(),
        })
        .collect::<String>()
        .into()
}

/// A status as a colored badge.
pub(crate) fn badge(status: Status) -> Markup {
    html! { span class={ "badge " (status.as_str()) } { (status.as_str()) } }
}

/// The names of the fields of [`NoticeParams`].
pub(crate) const NOTICE_FIELDS: [&str; 3] = ["notice", "action", "changed"];

/// The notice a redirect after an action asks for (`?notice=done&action=retry&changed=3`):
/// one of a fixed set of codes, written out here from parsed values only, so that a link
/// cannot put its own text in the console's success banner.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct NoticeParams {
    #[serde(default)]
    pub(crate) notice: Option<String>,
    #[serde(default)]
    pub(crate) action: Option<String>,
    #[serde(default)]
    pub(crate) changed: Option<String>,
}

impl NoticeParams {
    /// The notice's text, when its code and values are known.
    pub(crate) fn text(&self) -> Option<String> {
        match self.notice.as_deref()? {
            "done" => {
                let action = crate::base::query::Action::parse(self.action.as_deref()?)?;
                let changed: i64 = self.changed.as_deref()?.parse().ok()?;
                Some(format!(
                    "{}: {} changed",
                    action_label(action),
                    count_of(changed, "request")
                ))
            }
            "paused" => Some("Claims of the executor paused on every instance".into()),
            "resumed" => Some("Claims of the executor resumed".into()),
            "stop" => Some(
                "Asked to stop: its body is told within about a second; it ends cancelled unless it succeeds"
                    .into(),
            ),
            "partition" => Some(
                "Partition changed: every instance's next claim of the queue applies it".into(),
            ),
            "policy" => Some(
                "Policy changed: every instance applies it within about a second".into(),
            ),
            _ => None,
        }
    }
}

/// A notice or error line at the top of a page.
pub(crate) fn notice(text: Option<&str>, error: Option<&str>) -> Markup {
    html! {
        @if let Some(text) = text { p.notice id="notice" { (text) } }
        @if let Some(error) = error { p.error id="error" { (error) } }
    }
}

/// An action for people.
pub(crate) fn action_label(action: Action) -> &'static str {
    match action {
        Action::Retry => "Retry now",
        Action::Cancel => "Cancel",
        Action::Delete => "Delete",
        Action::ReplayDead => "Replay dead",
    }
}

#[cfg(test)]
mod tests {
    use super::{count_of, span, time_el};

    #[test]
    fn bidi_controls_are_shown_not_obeyed() {
        assert_eq!(super::visible("abc"), "abc");
        assert_eq!(super::visible("a\u{202e}b\u{2066}c"), "a⟦U+202E⟧b⟦U+2066⟧c");
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count_of(1, "request"), "1 request");
        assert_eq!(count_of(0, "request"), "0 requests");
        assert_eq!(count_of(12, "request"), "12 requests");
    }

    #[test]
    fn times_say_their_zone() {
        assert_eq!(
            time_el(1_764_649_086_000).into_string(),
            r#"<time datetime="2025-12-02T04:18:06Z">2025-12-02 04:18:06 UTC</time>"#
        );
        assert_eq!(time_el(0).into_string(), "—");
    }

    #[test]
    fn spans_under_a_second_show_milliseconds() {
        assert_eq!(span(0), "<1ms");
        assert_eq!(span(-5), "<1ms");
        assert_eq!(span(7), "7ms");
        assert_eq!(span(999), "999ms");
        assert_eq!(span(1500), "1s 500ms");
        assert_eq!(span(61_250), "1m 1s");
    }
}
