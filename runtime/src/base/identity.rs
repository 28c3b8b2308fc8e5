//! This instance's name, as written in `lease_owner`, `async_log.worker` and
//! `async_instance.owner`: `application@host:pid:<32 hex digits>`. The application, host
//! and pid are for people reading it; the 128 random bits are what keep two live
//! instances apart (in containers every replica is pid 1, and replicas of one deployment
//! may share a hostname pattern): renewals, hand-backs and outcome writes match on it.

/// The longest host part of a name, in characters.
const MAX_HOST_CHARS: usize = 64;

/// A name for a new instance of `application`, unique with overwhelming likelihood
/// (128 random bits).
pub(crate) fn instance_name(application: &str) -> String {
    named(application, &hostname(), std::process::id())
}

fn named(application: &str, host: &str, pid: u32) -> String {
    format!("{application}@{host}:{pid}:{:032x}", rand::random::<u128>())
}

/// This machine's name: `HOSTNAME`, else `/etc/hostname`, else `host`; sanitized.
fn hostname() -> String {
    let raw = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .unwrap_or_default();
    sanitized(&raw)
}

/// Letters, digits, `.`, `-` and `_` of `raw`, others as `-`, at most
/// [`MAX_HOST_CHARS`]; `host` when nothing is left.
fn sanitized(raw: &str) -> String {
    let host: String = raw
        .trim()
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '-',
        })
        .take(MAX_HOST_CHARS)
        .collect();
    if host.is_empty() {
        "host".into()
    } else {
        host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replicas in containers share a pid (1), often a hostname pattern too: the random
    /// part alone must keep their names apart.
    #[test]
    fn a_thousand_names_in_one_process_are_distinct() {
        let names: std::collections::HashSet<String> =
            (0..1000).map(|_| instance_name("app")).collect();
        assert_eq!(names.len(), 1000, "two instances got the same name");
    }

    #[test]
    fn a_name_reads_application_host_pid_and_random_part() {
        let name = named("billing", "web-7", 1);
        let (prefix, random) = name.rsplit_once(':').unwrap();
        assert_eq!(prefix, "billing@web-7:1");
        assert_eq!(random.len(), 32);
        assert!(random.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    }

    #[test]
    fn a_hostname_is_sanitized_and_bounded() {
        assert_eq!(sanitized("web-7.example.org\n"), "web-7.example.org");
        assert_eq!(sanitized("a b'c;\u{e9}"), "a-b-c--");
        assert_eq!(sanitized(" \n"), "host");
        assert_eq!(sanitized(&"x".repeat(300)).len(), MAX_HOST_CHARS);
    }
}
