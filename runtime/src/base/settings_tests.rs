//! Settings' validation: absurd values are refused by name.

use super::*;

fn refused(settings: Settings) -> &'static str {
    match settings.validate() {
        Err(Error::Config { setting, .. }) => setting,
        other => panic!("expected a refused setting, got {other:?}"),
    }
}

#[test]
fn absurd_settings_are_refused_by_name() {
    let base = Settings::default;
    assert!(base().validate().is_ok());
    let cases: Vec<(Settings, &str)> = vec![
        (
            Settings {
                default_max_attempts: 3_000_000_000,
                ..base()
            },
            "default_max_attempts",
        ),
        (
            Settings {
                default_timeout: Duration::MAX,
                ..base()
            },
            "default_timeout",
        ),
        (
            Settings {
                lease: Duration::MAX,
                heartbeat_interval: Duration::from_secs(1),
                ..base()
            },
            "lease",
        ),
        (
            Settings {
                poll_interval: Some(Duration::ZERO),
                ..base()
            },
            "poll_interval",
        ),
        (
            Settings {
                retry_interval: Duration::ZERO,
                ..base()
            },
            "retry_interval",
        ),
        (
            Settings {
                compensate_interval: Duration::ZERO,
                ..base()
            },
            "compensate_interval",
        ),
        (
            Settings {
                heartbeat_interval: Duration::ZERO,
                ..base()
            },
            "heartbeat_interval",
        ),
        (
            Settings {
                retry_max_delay: Duration::MAX,
                ..base()
            },
            "retry_max_delay",
        ),
        (
            Settings {
                stale_after: Duration::MAX,
                ..base()
            },
            "stale_after",
        ),
        (
            Settings {
                key_retention: Duration::ZERO,
                ..base()
            },
            "key_retention",
        ),
        (
            Settings {
                queue_sample_interval: Duration::from_millis(99),
                ..base()
            },
            "queue_sample_interval",
        ),
        (
            Settings {
                queue_sample_interval: Duration::MAX,
                ..base()
            },
            "queue_sample_interval",
        ),
        (
            Settings {
                key_retention: Duration::MAX,
                ..base()
            },
            "key_retention",
        ),
        (
            Settings {
                shutdown_grace: Duration::MAX,
                ..base()
            },
            "shutdown_grace",
        ),
        (
            Settings {
                concurrency: usize::MAX,
                ..base()
            },
            "concurrency",
        ),
        (
            Settings {
                channel_capacity: usize::MAX,
                ..base()
            },
            "channel_capacity",
        ),
        (
            Settings {
                max_connections: 0,
                ..base()
            },
            "max_connections",
        ),
        (
            Settings {
                retry_batch: -1,
                ..base()
            },
            "retry_batch",
        ),
        (
            Settings {
                compensate_batch: i64::MAX,
                ..base()
            },
            "compensate_batch",
        ),
        (
            Settings {
                retention: Some(Duration::ZERO),
                ..base()
            },
            "retention",
        ),
        (
            Settings {
                retention: Some(Duration::MAX),
                ..base()
            },
            "retention",
        ),
        (
            Settings {
                health_backlog_threshold: Duration::ZERO,
                ..base()
            },
            "health_backlog_threshold",
        ),
        (
            Settings {
                health_backlog_threshold: Duration::MAX,
                ..base()
            },
            "health_backlog_threshold",
        ),
        (
            Settings {
                application_name: "a\0b".into(),
                ..base()
            },
            "application_name",
        ),
        (
            Settings {
                application_name: "x".repeat(256),
                ..base()
            },
            "application_name",
        ),
    ];
    for (settings, setting) in cases {
        assert_eq!(refused(settings), setting);
    }
}

#[test]
fn debug_hides_the_database_password() {
    let settings = Settings {
        database_url: "postgres://app:s3cret@db:5432/app".into(),
        ..Settings::default()
    };
    let shown = format!("{settings:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("postgres://app:***@db:5432/app"), "{shown}");
}

#[test]
fn the_default_application_name_does_not_follow_the_binary() {
    assert_eq!(Settings::default().application_name, DEFAULT_APPLICATION);
}
