//! Timestamps and durations. The core never reads a clock: every rule that
//! depends on "now" takes it as a parameter (§4.6 strings, §6.4 ttl).

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::consts::{ENVELOPE_MAX_TTL_SECS, RESTORED_TIME_FRACTION_DIGITS};
use crate::error::{Error, Result};

/// An instant, as every document carries it: an RFC 3339 string.
pub type Instant = OffsetDateTime;

/// Parses a document timestamp: RFC 3339 in UTC, upper-case `T` and `Z`,
/// fractional seconds allowed (§4.6 pinned in docs/conformance.md: a signed
/// time has one spelling per instant and zone).
pub fn parse_time(field: &str, s: &str) -> Result<Instant> {
    let bad = || {
        Error::shape(
            field,
            "not an RFC 3339 UTC date-time (YYYY-MM-DDTHH:MM:SS[.fff]Z)",
        )
    };
    if s.len() > 40 || s.as_bytes().get(10) != Some(&b'T') || !s.ends_with('Z') {
        return Err(bad());
    }
    OffsetDateTime::parse(s, &Rfc3339).map_err(|_| bad())
}

/// Formats as RFC 3339 UTC with `Z`, whole seconds: how we write every timestamp.
pub fn format_time(t: Instant) -> String {
    let t = t
        .to_offset(time::UtcOffset::UTC)
        .replace_nanosecond(0)
        .unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// `t` truncated to the millisecond: the instant [`format_time_ms`] writes,
/// never later than `t`.
pub fn truncate_ms(t: Instant) -> Instant {
    let ms = t.nanosecond() / 1_000_000 * 1_000_000;
    t.replace_nanosecond(ms).unwrap_or(t)
}

/// §6.4.1: RFC 3339 UTC with exactly three fractional digits and `Z`
/// (`2026-10-20T08:00:00.000Z`), how restore notices and acks write times.
/// Anything finer than a millisecond is truncated.
pub fn format_time_ms(t: Instant) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let whole = format_time(t);
    let Some(base) = whole.strip_suffix('Z') else {
        return whole;
    };
    let digits = RESTORED_TIME_FRACTION_DIGITS;
    let frac = t.nanosecond() / 10u32.pow(9 - digits as u32);
    format!("{base}.{frac:0digits$}Z")
}

/// §6.4.1: a restore notice's or ack's time, read strictly: whole seconds
/// (`…T08:00:00Z`) or exactly three fractional digits (`…T08:00:00.000Z`),
/// otherwise as [`parse_time`].
pub fn parse_time_ms(field: &str, s: &str) -> Result<Instant> {
    const WHOLE_LEN: usize = "2026-10-20T08:00:00Z".len();
    let fraction_len = 1 + RESTORED_TIME_FRACTION_DIGITS;
    let ok = s.len() == WHOLE_LEN
        || (s.len() == WHOLE_LEN + fraction_len && s.as_bytes().get(WHOLE_LEN - 1) == Some(&b'.'));
    if !ok {
        return Err(Error::shape(
            field,
            "must be YYYY-MM-DDTHH:MM:SS.fffZ (or whole seconds)",
        ));
    }
    parse_time(field, s)
}

/// Unix seconds to an instant.
pub fn from_unix(secs: i64) -> Result<Instant> {
    OffsetDateTime::from_unix_timestamp(secs).map_err(|_| Error::shape("time", "out of range"))
}

/// `<n><s|m|h|d>` in seconds, `n` decimal digits (zero allowed): the one
/// duration syntax of the protocol (§6.4 `ttl`) and of every service's
/// flags and config. `None` for anything else, or on overflow.
pub fn parse_duration(s: &str) -> Option<i64> {
    // Checked: the last byte may be inside a multi-byte character (`1ђ`).
    let (num, unit) = s.split_at_checked(s.len().checked_sub(1)?)?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return None,
    };
    num.parse::<i64>().ok()?.checked_mul(mult)
}

/// §6.4: `ttl` is `<n><s|m|h|d>` with a positive `n` and no leading zero,
/// at most 7 days. Returns seconds.
pub fn parse_ttl(s: &str) -> Result<i64> {
    let bad = || Error::shape("ttl", "must be <n><s|m|h|d>, n a positive integer");
    let num = s.get(..s.len().saturating_sub(1)).unwrap_or_default();
    if num.len() > 9 || num.starts_with('0') {
        return Err(bad());
    }
    let secs = parse_duration(s).ok_or_else(bad)?;
    if secs > ENVELOPE_MAX_TTL_SECS {
        return Err(Error::shape("ttl", "over 7 days"));
    }
    Ok(secs)
}

/// §5.3: `max_frequency` is `<n>/<minute|hour|day>`; returns (n, window seconds).
pub fn parse_frequency(field: &str, s: &str) -> Result<(u64, i64)> {
    let bad = || Error::shape(field, "must be <n>/<minute|hour|day>");
    let (n, unit) = s.split_once('/').ok_or_else(bad)?;
    let window = match unit {
        "minute" => 60,
        "hour" => 3600,
        "day" => 86400,
        _ => return Err(bad()),
    };
    if n.is_empty()
        || n.len() > 9
        || (n.len() > 1 && n.starts_with('0'))
        || !n.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    Ok((n.parse().map_err(|_| bad())?, window))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_grammar_and_cap() {
        assert_eq!(parse_ttl("48h").unwrap(), 172800);
        assert_eq!(parse_ttl("7d").unwrap(), 604800);
        assert_eq!(parse_ttl("604800s").unwrap(), 604800);
        for bad in [
            "604801s",
            "8d",
            "169h",
            "0s",
            "",
            "h",
            "48",
            "048h",
            "4.5h",
            "-1h",
            "48H",
            " 48h",
            "9999999999d",
            "1ђ",
            "ђ",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn duration_grammar() {
        assert_eq!(parse_duration("0s"), Some(0));
        assert_eq!(parse_duration("14d"), Some(14 * 86400));
        assert_eq!(parse_duration("90m"), Some(5400));
        for bad in [
            "",
            "d",
            "14",
            "1.5h",
            "-1h",
            "14D",
            "1ђ",
            "ђ",
            "99999999999999999999d",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?} accepted");
        }
        assert_eq!(parse_duration(&format!("{}d", i64::MAX / 86400 + 1)), None);
    }

    #[test]
    fn frequency_grammar() {
        assert_eq!(parse_frequency("f", "20/day").unwrap(), (20, 86400));
        assert_eq!(parse_frequency("f", "0/hour").unwrap(), (0, 3600));
        for bad in [
            "20", "20/week", "/day", "x/day", "01/day", "20/Day", "-1/day",
        ] {
            assert!(parse_frequency("f", bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn times_parse_and_format() {
        let t = parse_time("t", "2026-10-20T08:00:00.000Z").unwrap();
        assert_eq!(format_time(t), "2026-10-20T08:00:00Z");
        let t2 = OffsetDateTime::parse("2026-10-20T10:00:00+02:00", &Rfc3339).unwrap();
        assert_eq!(t, t2, "compared as instants");
        for bad in [
            "2026-10-20T10:00:00+02:00",
            "2026-10-20T08:00:00+00:00",
            "2026-10-20t08:00:00z",
            "2026-10-20 08:00:00Z",
        ] {
            assert!(
                parse_time("t", bad).is_err(),
                "{bad:?} accepted as a document time"
            );
        }
        for bad in [
            "2026-10-20",
            "2026-10-20T08:00:00",
            "yesterday",
            "2026-13-01T00:00:00Z",
        ] {
            assert!(parse_time("t", bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn restore_times_are_written_in_milliseconds() {
        let t = parse_time("t", "2026-10-20T08:00:00Z").unwrap();
        assert_eq!(format_time_ms(t), "2026-10-20T08:00:00.000Z");
        let fine = t + time::Duration::nanoseconds(1_234_567_891);
        assert_eq!(format_time_ms(fine), "2026-10-20T08:00:01.234Z");
        assert_eq!(
            truncate_ms(fine),
            parse_time("t", "2026-10-20T08:00:01.234Z").unwrap()
        );
        let offset = fine.to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        assert_eq!(format_time_ms(offset), "2026-10-20T08:00:01.234Z");
        assert_eq!(
            parse_time_ms("f", &format_time_ms(fine)).unwrap(),
            truncate_ms(fine)
        );
    }

    #[test]
    fn restore_times_read_whole_seconds_or_milliseconds_only() {
        let t = parse_time("t", "2026-10-20T08:00:00Z").unwrap();
        assert_eq!(parse_time_ms("f", "2026-10-20T08:00:00.000Z").unwrap(), t);
        assert_eq!(parse_time_ms("f", "2026-10-20T08:00:00Z").unwrap(), t);
        assert_eq!(
            parse_time_ms("f", "2026-10-20T08:00:00.250Z").unwrap(),
            t + time::Duration::milliseconds(250)
        );
        for bad in [
            "2026-10-20T08:00:00.5Z",
            "2026-10-20T08:00:00.25Z",
            "2026-10-20T08:00:00.0000Z",
            "2026-10-20T08:00:00.000000Z",
            "2026-10-20T08:00:00.000+00:00",
            "2026-10-20T08:00:00.000z",
            "2026-10-20t08:00:00.000Z",
            "2026-10-20T08:00:00,000Z",
            "2026-10-20T08:00:00.0a0Z",
            "2026-10-20 08:00:00.000Z",
            "2026-10-20T08:00:60.000Z",
        ] {
            assert!(
                matches!(parse_time_ms("f", bad), Err(Error::Shape { field, .. }) if field == "f"),
                "{bad:?} accepted"
            );
        }
    }
}
