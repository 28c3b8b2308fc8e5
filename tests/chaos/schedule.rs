//! The chaos test's fault schedule, drawn from a seed: what to do to which instance, when.
//! The first faults are one of each kind (in a seeded order), so that a short run still
//! injects every kind; the rest are drawn at random.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// One fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL, then a restart after `restart_ms`.
    Kill { restart_ms: u64 },
    /// SIGTERM (graceful), then a restart after `restart_ms`.
    Term { restart_ms: u64 },
    /// Connections dropped and refused for `ms`.
    Refuse { ms: u64 },
    /// Connections dropped (reset) every `every_ms` for `ms`; new ones accepted.
    Reset { ms: u64, every_ms: u64 },
    /// Nothing moves for `ms`.
    Stall { ms: u64 },
    /// The connections open now go silent for ever, new ones pass; the server notices
    /// (resets its side) after `notice_ms`, as its TCP keepalive would.
    BlackHole { notice_ms: u64 },
    /// Every chunk delayed by `delay_ms`, for `ms`.
    Latency { ms: u64, delay_ms: u64 },
    /// SIGTERM, then a restart with the clock off by `offset_ms`.
    Skew { offset_ms: i64 },
}

/// A fault at `at_ms` after the schedule starts, on instance `instance` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub at_ms: u64,
    pub instance: usize,
    pub action: Action,
}

/// An outage shorter than the lease (the lease must hold) or longer (it must be lost).
fn outage(rng: &mut StdRng, lease_ms: u64, long: bool) -> u64 {
    if long {
        rng.gen_range(lease_ms + 1_000..=lease_ms * 2)
    } else {
        rng.gen_range(lease_ms / 4..=lease_ms * 2 / 3)
    }
}

fn draw(rng: &mut StdRng, kind: usize, lease_ms: u64, skews: &mut i64) -> Action {
    match kind {
        0 => Action::Kill {
            restart_ms: rng.gen_range(300..=2_500),
        },
        1 => Action::Term {
            restart_ms: rng.gen_range(300..=2_500),
        },
        2 => Action::Refuse {
            ms: outage(rng, lease_ms, false),
        },
        3 => Action::Refuse {
            ms: outage(rng, lease_ms, true),
        },
        4 => Action::Stall {
            ms: outage(rng, lease_ms, false),
        },
        5 => Action::Stall {
            ms: outage(rng, lease_ms, true),
        },
        6 => {
            let long = rng.gen_bool(0.5);
            Action::Reset {
                ms: outage(rng, lease_ms, long),
                every_ms: rng.gen_range(50..=1_000),
            }
        }
        7 => Action::Latency {
            ms: rng.gen_range(2_000..=6_000),
            delay_ms: rng.gen_range(10..=150),
        },
        9 => Action::BlackHole {
            notice_ms: rng.gen_range(lease_ms..=lease_ms * 3),
        },
        _ => {
            // More than the lease, ahead and behind in turn.
            *skews += 1;
            let off = rng.gen_range(lease_ms as i64 + 2_000..=lease_ms as i64 * 4);
            Action::Skew {
                offset_ms: if *skews % 2 == 1 { off } else { -off },
            }
        }
    }
}

/// The schedule for `secs` seconds of faults on three instances.
pub fn plan(seed: u64, secs: u64, lease_ms: u64) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut first: Vec<usize> = (0..10).collect();
    first.shuffle(&mut rng);
    let mut skews = 0;
    let mut plan = Vec::new();
    let mut at = 2_000;
    let end = secs * 1_000;
    let mut i = 0;
    while at < end {
        let kind = match first.get(i) {
            Some(&kind) => kind,
            // Kills, stops and network faults alike; a skewed restart now and then.
            None => match rng.gen_range(0..100) {
                0..=11 => 0,
                12..=21 => 1,
                22..=33 => 2,
                34..=45 => 3,
                46..=57 => 4,
                58..=69 => 5,
                70..=81 => 6,
                82..=89 => 7,
                90..=97 => 9,
                _ => 8,
            },
        };
        plan.push(Planned {
            at_ms: at,
            instance: rng.gen_range(0..3),
            action: draw(&mut rng, kind, lease_ms, &mut skews),
        });
        at += rng.gen_range(700..=2_500);
        i += 1;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule_with_every_kind() {
        let plan = plan(42, 60, 3_000);
        assert_eq!(plan, super::plan(42, 60, 3_000));
        assert_ne!(plan, super::plan(43, 60, 3_000));
        let has = |f: &dyn Fn(&Action) -> bool| plan.iter().any(|p| f(&p.action));
        assert!(has(&|a| matches!(a, Action::Kill { .. })));
        assert!(has(&|a| matches!(a, Action::Term { .. })));
        assert!(has(&|a| matches!(a, Action::Refuse { ms } if *ms < 3_000)));
        assert!(has(&|a| matches!(a, Action::Refuse { ms } if *ms > 3_000)));
        assert!(has(&|a| matches!(a, Action::Stall { ms } if *ms < 3_000)));
        assert!(has(&|a| matches!(a, Action::Stall { ms } if *ms > 3_000)));
        assert!(has(&|a| matches!(a, Action::Reset { .. })));
        assert!(has(&|a| matches!(a, Action::Latency { .. })));
        assert!(has(&|a| matches!(a, Action::BlackHole { .. })));
        assert!(has(
            &|a| matches!(a, Action::Skew { offset_ms } if offset_ms.abs() > 3_000)
        ));
        assert!(plan.iter().all(|p| p.at_ms < 60_000 && p.instance < 3));
    }
}
