//! The calendar adapter (SPEC §7.4): the owner's busy times from a strict
//! JSON busy list or `.ics` files, as free/busy only. Titles, descriptions,
//! locations and attendees are never read, so they cannot reach a peer.
//! Paths come only from the owner's command line, never from a peer.
//!
//! JSON: `{"busy": [{"start": "…", "end": "…"}], "timezone": "+02:00"}`,
//! nothing else; times are RFC 3339, with an offset unless `timezone` is
//! given. `.ics`: each VEVENT's DTSTART/DTEND (UTC, TZID or floating times;
//! all-day dates), skipping TRANSP:TRANSPARENT and STATUS:CANCELLED; and
//! VFREEBUSY FREEBUSY periods. Recurring events (RRULE) are counted, not
//! expanded: only their first occurrence is busy.

use std::path::{Path, PathBuf};

use chrono::TimeZone;
use icalendar::{Component, DatePerhapsTime};
use rdv_agent_core::meeting::Slot;
use rdv_proto::time::Instant;
use serde::Deserialize;
use time::UtcOffset;

use crate::error::{Error, Result};

/// A calendar file is read only up to this size.
pub const CALENDAR_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// At most this many busy intervals are kept (the earliest ones).
pub const CALENDAR_MAX_BUSY: usize = 10_000;

/// What the files gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Busy {
    pub busy: Vec<Slot>,
    /// Recurring events whose later occurrences were not expanded.
    pub recurring: usize,
    pub sources: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonCalendar {
    busy: Vec<JsonBusy>,
    #[serde(default)]
    timezone: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonBusy {
    start: String,
    end: String,
}

/// `+02:00`, `-05:30` or `Z`.
pub fn parse_offset(s: &str) -> Result<UtcOffset> {
    if s == "Z" || s == "UTC" {
        return Ok(UtcOffset::UTC);
    }
    let bad = || Error::Input(format!("{s}: a time zone offset is +HH:MM or -HH:MM"));
    let b = s.as_bytes();
    if b.len() != 6 || !matches!(b[0], b'+' | b'-') || b[3] != b':' {
        return Err(bad());
    }
    let h: i8 = s[1..3].parse().map_err(|_| bad())?;
    let m: i8 = s[4..6].parse().map_err(|_| bad())?;
    let sign = if b[0] == b'-' { -1 } else { 1 };
    UtcOffset::from_hms(sign * h, sign * m, 0).map_err(|_| bad())
}

fn interval(start: Instant, end: Instant) -> Option<Slot> {
    (end > start).then_some(Slot { start, end })
}

fn json_time(s: &str, tz: Option<UtcOffset>) -> Result<Instant> {
    if let Some(t) = rdv_agent_core::a2a::parse_offset_time(s) {
        return Ok(t);
    }
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    match (tz, time::PrimitiveDateTime::parse(s, &fmt)) {
        (Some(tz), Ok(p)) => Ok(p.assume_offset(tz)),
        _ => Err(Error::Input(
            "a busy time is RFC 3339 with an offset (or give \"timezone\")".into(),
        )),
    }
}

/// A strict JSON busy list.
pub fn parse_json(text: &str) -> Result<Vec<Slot>> {
    let c: JsonCalendar = serde_json::from_str(text)
        .map_err(|e| Error::Input(format!("not a busy list ({{\"busy\": [...]}}): {e}")))?;
    let tz = c.timezone.as_deref().map(parse_offset).transpose()?;
    let mut out = Vec::new();
    for b in c.busy {
        let (s, e) = (json_time(&b.start, tz)?, json_time(&b.end, tz)?);
        out.push(
            interval(s, e)
                .ok_or_else(|| Error::Input("a busy entry ends before it starts".into()))?,
        );
    }
    Ok(out)
}

fn from_chrono(t: chrono::DateTime<chrono::Utc>) -> Option<Instant> {
    let ns = t.timestamp_nanos_opt()?;
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns)).ok()
}

fn local(n: chrono::NaiveDateTime, tz: UtcOffset) -> Option<Instant> {
    let off = chrono::FixedOffset::east_opt(tz.whole_seconds())?;
    let t = off.from_local_datetime(&n).single()?;
    from_chrono(t.with_timezone(&chrono::Utc))
}

/// One DTSTART/DTEND value as an instant; `tz` for floating times and dates.
fn instant(d: &DatePerhapsTime, tz: UtcOffset) -> Option<Instant> {
    match d {
        DatePerhapsTime::Date(date) => local(date.and_hms_opt(0, 0, 0)?, tz),
        DatePerhapsTime::DateTime(icalendar::CalendarDateTime::Floating(n)) => local(*n, tz),
        DatePerhapsTime::DateTime(dt) => from_chrono(dt.try_into_utc()?),
    }
}

/// `.ics` text: busy intervals, and how many recurring events were seen.
pub fn parse_ics(text: &str, tz: UtcOffset) -> Result<(Vec<Slot>, usize)> {
    let cal: icalendar::Calendar = text
        .parse()
        .map_err(|_| Error::Input("not an iCalendar file".into()))?;
    let mut out = Vec::new();
    let mut recurring = 0;
    for c in &cal.components {
        if let Some(e) = c.as_event() {
            if e.property_value("TRANSP")
                .is_some_and(|v| v.eq_ignore_ascii_case("TRANSPARENT"))
                || e.property_value("STATUS")
                    .is_some_and(|v| v.eq_ignore_ascii_case("CANCELLED"))
            {
                continue;
            }
            if e.property_value("RRULE").is_some() {
                recurring += 1;
            }
            let Some(start) = e.get_start() else { continue };
            let Some(s) = instant(&start, tz) else {
                continue;
            };
            let end = match (e.get_end(), &start) {
                (Some(end), _) => instant(&end, tz),
                // RFC 5545 §3.6.1: an all-day event without DTEND is one day.
                (None, DatePerhapsTime::Date(_)) => Some(s + time::Duration::days(1)),
                (None, _) => None,
            };
            if let Some(slot) = end.and_then(|e| interval(s, e)) {
                out.push(slot);
            }
        } else if let icalendar::CalendarComponent::Other(o) = c
            && o.component_kind().eq_ignore_ascii_case("VFREEBUSY")
        {
            let single = o.properties().get("FREEBUSY");
            let multi = o.multi_properties().get("FREEBUSY").into_iter().flatten();
            for p in single.into_iter().chain(multi) {
                if p.params()
                    .get("FBTYPE")
                    .is_some_and(|t| t.value().eq_ignore_ascii_case("FREE"))
                {
                    continue;
                }
                for period in p.value().split(',') {
                    if let Some(slot) = freebusy_period(period) {
                        out.push(slot);
                    }
                }
            }
        }
    }
    Ok((out, recurring))
}

/// A FREEBUSY period `start/end` in UTC (RFC 5545 §3.3.9, explicit end).
fn freebusy_period(p: &str) -> Option<Slot> {
    let (a, b) = p.trim().split_once('/')?;
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let s = time::PrimitiveDateTime::parse(a, &fmt).ok()?.assume_utc();
    let e = time::PrimitiveDateTime::parse(b, &fmt).ok()?.assume_utc();
    interval(s, e)
}

fn read_bounded(path: &Path) -> Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(Error::Input(format!("{}: not a file", path.display())));
    }
    let mut buf = Vec::new();
    std::fs::File::open(path)?
        .take(CALENDAR_MAX_BYTES + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > CALENDAR_MAX_BYTES {
        return Err(Error::Input(format!(
            "{}: over {CALENDAR_MAX_BYTES} bytes",
            path.display()
        )));
    }
    // Errors never echo the file's contents.
    String::from_utf8(buf).map_err(|_| Error::Input(format!("{}: not UTF-8", path.display())))
}

/// Reads the owner's calendar files (`.json` busy lists, `.ics`).
pub fn read_paths(paths: &[PathBuf], tz: UtcOffset) -> Result<Busy> {
    let mut busy = Vec::new();
    let mut recurring = 0;
    let mut sources = Vec::new();
    for p in paths {
        let real =
            std::fs::canonicalize(p).map_err(|e| Error::Input(format!("{}: {e}", p.display())))?;
        let text = read_bounded(&real)?;
        let ext = real
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let named = |e: Error| Error::Input(format!("{}: {e}", real.display()));
        match ext.as_deref() {
            Some("json") => busy.extend(parse_json(&text).map_err(named)?),
            Some("ics") | Some("ical") => {
                let (b, r) = parse_ics(&text, tz).map_err(named)?;
                busy.extend(b);
                recurring += r;
            }
            _ => {
                return Err(Error::Input(format!(
                    "{}: a calendar is a .json busy list or an .ics file",
                    real.display()
                )));
            }
        }
        sources.push(real.display().to_string());
    }
    busy.sort();
    busy.dedup();
    busy.truncate(CALENDAR_MAX_BUSY);
    Ok(Busy {
        busy,
        recurring,
        sources,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(s: &str) -> Instant {
        rdv_proto::time::parse_time("t", s).unwrap()
    }

    #[test]
    fn the_json_busy_list_is_strict() {
        let b = parse_json(r#"{"busy": [{"start": "2026-12-03T19:00:00+01:00", "end": "2026-12-03T21:00:00+01:00"}]}"#).unwrap();
        assert_eq!(
            b,
            vec![Slot {
                start: t("2026-12-03T18:00:00Z"),
                end: t("2026-12-03T20:00:00Z")
            }]
        );
        // A title, or any other key, is refused: nothing but free/busy.
        assert!(parse_json(r#"{"busy": [{"start": "2026-12-03T19:00:00Z", "end": "2026-12-03T21:00:00Z", "title": "x"}]}"#).is_err());
        assert!(parse_json(r#"{"busy": [], "owner": "x"}"#).is_err());
        // No offset without a timezone.
        assert!(
            parse_json(
                r#"{"busy": [{"start": "2026-12-03T19:00:00", "end": "2026-12-03T21:00:00"}]}"#
            )
            .is_err()
        );
        let b = parse_json(r#"{"timezone": "+02:00", "busy": [{"start": "2026-12-03T19:00:00", "end": "2026-12-03T21:00:00"}]}"#).unwrap();
        assert_eq!(b[0].start, t("2026-12-03T17:00:00Z"));
    }

    #[test]
    fn ics_events_are_busy_times_without_titles() {
        let ics = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n\
BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Secret doctor visit\r\nDTSTART:20261203T190000Z\r\nDTEND:20261203T210000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:2\r\nDTSTART;TZID=Europe/Berlin:20261204T190000\r\nDTEND;TZID=Europe/Berlin:20261204T200000\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:3\r\nDTSTART;VALUE=DATE:20261205\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:4\r\nTRANSP:TRANSPARENT\r\nDTSTART:20261206T190000Z\r\nDTEND:20261206T210000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:5\r\nSTATUS:CANCELLED\r\nDTSTART:20261207T190000Z\r\nDTEND:20261207T210000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:6\r\nDTSTART:20261208T190000\r\nDTEND:20261208T200000\r\nRRULE:FREQ=WEEKLY\r\nEND:VEVENT\r\n\
END:VCALENDAR\r\n";
        let (b, recurring) = parse_ics(ics, UtcOffset::from_hms(2, 0, 0).unwrap()).unwrap();
        assert_eq!(recurring, 1);
        assert_eq!(
            b,
            vec![
                Slot {
                    start: t("2026-12-03T19:00:00Z"),
                    end: t("2026-12-03T21:00:00Z")
                },
                // Berlin is UTC+1 in December.
                Slot {
                    start: t("2026-12-04T18:00:00Z"),
                    end: t("2026-12-04T19:00:00Z")
                },
                // All day in the owner's zone (+02:00).
                Slot {
                    start: t("2026-12-04T22:00:00Z"),
                    end: t("2026-12-05T22:00:00Z")
                },
                // Floating: the owner's zone.
                Slot {
                    start: t("2026-12-08T17:00:00Z"),
                    end: t("2026-12-08T18:00:00Z")
                },
            ]
        );
        let shown = format!("{b:?}");
        assert!(!shown.contains("Secret"));
    }

    #[test]
    fn files_are_bounded_and_typed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cal.txt");
        std::fs::write(&p, "{}").unwrap();
        assert!(read_paths(&[p], UtcOffset::UTC).is_err());
        let p = dir.path().join("cal.json");
        std::fs::write(
            &p,
            r#"{"busy": [{"start": "2026-12-03T19:00:00Z", "end": "2026-12-03T21:00:00Z"}]}"#,
        )
        .unwrap();
        let b = read_paths(&[p], UtcOffset::UTC).unwrap();
        assert_eq!(b.busy.len(), 1);
    }
}
