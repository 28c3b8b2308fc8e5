//! Times on the command line: ages (`7d`), instants (`2026-12-01T09:30:00Z`, unix ms, or
//! an age ago) and unix milliseconds printed as UTC.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `90s`, `30m`, `12h`, `7d`, `2w`, `250ms`: an age.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. `7d`, `12h`, `30m`, `90s`"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}`: expected a whole number before the unit, e.g. `7d`"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}`: use ms, s, m, h, d or w"
            ))
        }
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// An age in the largest unit that divides it: `30d`, `12h`, `90s`, `250ms`.
pub(crate) fn format_age(age: Duration) -> String {
    let ms = age.as_millis();
    for (unit, size) in [
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Now, in unix milliseconds (this machine's clock).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// An instant, in unix ms: unix milliseconds, `YYYY-MM-DD` (midnight UTC),
/// `YYYY-MM-DDTHH:MM[:SS[.fff]]` with `Z`, `±HH:MM` or nothing (UTC), or an age such
/// as `2h` (that long ago).
pub(crate) fn parse_instant(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| format!("`{text}`: too large for unix milliseconds"));
    }
    if let Ok(age) = parse_duration(text) {
        return Ok(now_ms().saturating_sub(age.as_millis() as i64));
    }
    parse_datetime(text).ok_or_else(|| {
        format!(
            "`{text}` is not a time: write `2026-12-01`, `2026-12-01T09:30:00Z`, \
             `2026-12-01T09:30:00+02:00`, unix milliseconds, or an age such as `2h`"
        )
    })
}

fn parse_datetime(text: &str) -> Option<i64> {
    let (date, rest) = text.split_at(text.len().min(10));
    let mut parts = date.split('-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    if date.len() != 10 || !(1..=12).contains(&month) || !(1..=days_in(year, month)).contains(&day)
    {
        return None;
    }
    let mut ms = days_from_civil(year, month, day) * 86_400_000;
    if rest.is_empty() {
        return Some(ms);
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (clock, offset_ms) = if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else if let Some(at) = rest.rfind(['+', '-']) {
        let (clock, offset) = rest.split_at(at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let (h, m) = offset[1..].split_once(':')?;
        let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
        if h > 23 || m > 59 {
            return None;
        }
        (clock, sign * (h * 3_600_000 + m * 60_000))
    } else {
        (rest, 0)
    };
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut fields = hms.split(':');
    let hour: i64 = fields.next()?.parse().ok()?;
    let minute: i64 = fields.next()?.parse().ok()?;
    let second: i64 = fields.next().map_or(Some(0), |s| s.parse().ok())?;
    if fields.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let millis: i64 = if fraction.is_empty() {
        0
    } else if fraction.bytes().all(|b| b.is_ascii_digit()) {
        format!("{fraction:0<3}")[..3].parse().ok()?
    } else {
        return None;
    };
    ms += hour * 3_600_000 + minute * 60_000 + second * 1_000 + millis;
    Some(ms - offset_ms)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Unix milliseconds as `2026-12-01 09:30:00.123Z`.
pub(crate) fn format_ms(ms: i64) -> String {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000,
    );
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_parse_and_print_in_utc() {
        assert_eq!(parse_instant("0"), Ok(0));
        assert_eq!(parse_instant("1970-01-02"), Ok(86_400_000));
        assert_eq!(parse_instant("2000-02-29T12:00:00Z"), Ok(951_825_600_000));
        assert_eq!(
            parse_instant("2000-02-29T14:00:00+02:00"),
            Ok(951_825_600_000)
        );
        assert_eq!(parse_instant("2000-02-29 12:00:00.5"), Ok(951_825_600_500));
        assert!(parse_instant("2001-02-29").is_err());
        assert!(parse_instant("yesterday").is_err());
        assert_eq!(format_ms(951_825_600_500), "2000-02-29 12:00:00.500Z");
        assert_eq!(format_ms(-1), "1969-12-31 23:59:59.999Z");
        let ago = parse_instant("2h").unwrap();
        assert!((now_ms() - ago - 7_200_000).abs() < 5_000);
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("7").unwrap_err().contains("no unit"));
        assert!(parse_duration("7y").unwrap_err().contains("unknown unit"));
        assert_eq!(format_age(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(format_age(Duration::from_secs(14 * 86_400)), "2w");
        assert_eq!(format_age(Duration::from_secs(90)), "90s");
        assert_eq!(format_age(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_age(Duration::ZERO), "0ms");
    }
}
