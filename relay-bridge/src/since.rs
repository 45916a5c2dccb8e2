//! The `since=` parameter of a subscription (issue #5, as ntfy defines it):
//! `all`, `latest`, `none`, a message id, a Unix time or a duration.

/// Where a subscription starts in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// Nothing from the cache (the default for a stream).
    None,
    /// Everything cached (the default for `poll=1`).
    All,
    /// Only the newest cached message per subscription.
    Latest,
    /// Messages after the one with this id.
    Id(String),
    /// Messages at or after this Unix time (seconds).
    Time(i64),
    /// Messages after this ordering key (internal: a lagging subscriber's
    /// catch-up; never parsed from a request).
    Key(i64),
}

/// Parses `since`; `now_secs` turns a duration into a time.
pub fn parse(s: &str, now_secs: i64) -> Result<Since, &'static str> {
    match s {
        "" | "none" => return Ok(Since::None),
        "all" => return Ok(Since::All),
        "latest" => return Ok(Since::Latest),
        _ => {}
    }
    if s.len() > 20 {
        return Err("invalid since");
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map(Since::Time)
            .map_err(|_| "invalid since");
    }
    if let Some(d) = parse_duration(s) {
        return Ok(Since::Time(now_secs.saturating_sub(d)));
    }
    if crate::message::is_id(s) {
        return Ok(Since::Id(s.to_owned()));
    }
    Err("invalid since")
}

/// `<n><s|m|h|d>` in seconds (also used by the config): the core's one
/// duration syntax.
pub use rdv_proto::time::parse_duration;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse("all", 100), Ok(Since::All));
        assert_eq!(parse("latest", 100), Ok(Since::Latest));
        assert_eq!(parse("none", 100), Ok(Since::None));
        assert_eq!(parse("1700000000", 100), Ok(Since::Time(1_700_000_000)));
        assert_eq!(parse("10m", 1000), Ok(Since::Time(400)));
        assert_eq!(parse("1d", 100_000), Ok(Since::Time(13_600)));
        assert_eq!(
            parse("AbC123xyz789", 0),
            Ok(Since::Id("AbC123xyz789".into()))
        );
        assert!(parse("a-b", 0).is_err());
        assert!(parse(&"9".repeat(40), 0).is_err());
        assert_eq!(parse_duration("12h"), Some(43_200));
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("5x"), None);
        // Found by fuzzing (relay-bridge/fuzz since_and_topics): a
        // multi-byte last character panicked.
        assert_eq!(parse_duration("10ђ"), None);
        assert!(parse("10ђ", 0).is_err());
    }
}
