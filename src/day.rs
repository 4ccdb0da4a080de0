//! Day clocks: when a provider's day ends, and HTTP-date retry hints.
//!
//! A free tier's daily quota resets at one zone's midnight (OpenRouter's at UTC, Gemini's at
//! midnight Pacific). A refusal for a spent day is worth nothing before then, whatever short
//! retry hint comes with it, so such a rest lasts until that midnight. Zones shift with daylight
//! saving, which is why this is computed with the tz database rather than a fixed offset.

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// The epoch ms of the first midnight in `zone` strictly after `now_ms`.
pub fn next_midnight_ms(zone: Tz, now_ms: u64) -> u64 {
    let Some(local) = local_date(zone, now_ms) else {
        return now_ms;
    };
    let Some(tomorrow) = local.checked_add_days(Days::new(1)) else {
        return now_ms;
    };
    start_of(zone, tomorrow).unwrap_or(now_ms)
}

/// One day of a zone's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Day {
    /// Its date on that clock, `YYYY-MM-DD`.
    pub date: String,
    /// When it began (epoch ms): its midnight, or the first moment after a midnight that a
    /// clock change skips.
    pub start_ms: u64,
}

/// The last `n` days of `zone`'s clock up to the one holding `now_ms`, oldest first (that day
/// last). Each day ends where the next begins; the last ends at [`next_midnight_ms`]. Days are
/// 23 to 25 hours long where the zone keeps daylight saving time.
pub fn last_days(zone: Tz, now_ms: u64, n: u32) -> Vec<Day> {
    let Some(today) = local_date(zone, now_ms) else {
        return Vec::new();
    };
    (0..n)
        .rev()
        .filter_map(|back| {
            let date = today.checked_sub_days(Days::new(u64::from(back)))?;
            Some(Day {
                date: date.to_string(),
                start_ms: start_of(zone, date)?,
            })
        })
        .collect()
}

/// The date in `zone` at `now_ms`.
fn local_date(zone: Tz, now_ms: u64) -> Option<NaiveDate> {
    let now = DateTime::<Utc>::from_timestamp_millis(i64::try_from(now_ms).ok()?)?;
    Some(now.with_timezone(&zone).date_naive())
}

/// When `date` begins in `zone` (epoch ms).
fn start_of(zone: Tz, date: NaiveDate) -> Option<u64> {
    // A midnight that a clock change skips is the first moment of that day that exists.
    let midnight = date.and_time(NaiveTime::MIN);
    let start = zone.from_local_datetime(&midnight).earliest().or_else(|| {
        (1..=4).find_map(|h| {
            let later = midnight + chrono::Duration::hours(h);
            zone.from_local_datetime(&later).earliest()
        })
    })?;
    Some(start.timestamp_millis().max(0) as u64)
}

/// An HTTP-date (`Wed, 21 Oct 2026 07:28:00 GMT`, RFC 9110 §5.6.7) as epoch ms.
pub fn parse_http_date_ms(text: &str) -> Option<u64> {
    let at = DateTime::parse_from_rfc2822(text.trim()).ok()?;
    u64::try_from(at.timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> u64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis() as u64
    }

    #[test]
    fn the_next_midnight_is_the_zones_and_follows_daylight_saving() {
        let utc = chrono_tz::UTC;
        let pacific = chrono_tz::America::Los_Angeles;
        assert_eq!(
            next_midnight_ms(utc, ms("2026-12-01T12:34:56Z")),
            ms("2026-12-02T00:00:00Z")
        );
        // Exactly at midnight, the day just began: its end is the next one.
        assert_eq!(
            next_midnight_ms(utc, ms("2026-12-02T00:00:00Z")),
            ms("2026-12-03T00:00:00Z")
        );
        // Winter: Pacific is UTC-8; summer: UTC-7.
        assert_eq!(
            next_midnight_ms(pacific, ms("2026-12-01T20:00:00Z")),
            ms("2026-12-02T08:00:00Z")
        );
        assert_eq!(
            next_midnight_ms(pacific, ms("2026-07-01T20:00:00Z")),
            ms("2026-07-02T07:00:00Z")
        );
        // The clocks go back on 2026-11-01 (02:00 PDT becomes 01:00 PST): that day lasts 25
        // hours, its midnight is still PDT and the next one PST.
        assert_eq!(
            next_midnight_ms(pacific, ms("2026-11-01T05:00:00Z")),
            ms("2026-11-01T07:00:00Z")
        );
        assert_eq!(
            next_midnight_ms(pacific, ms("2026-11-01T12:00:00Z")),
            ms("2026-11-02T08:00:00Z")
        );
    }

    #[test]
    fn the_last_days_begin_at_the_zones_midnights_and_end_with_today() {
        let pacific = chrono_tz::America::Los_Angeles;
        // 2026-11-02 12:00 PST: today is the 2nd; the 1st lasted 25 hours.
        let now = ms("2026-11-02T20:00:00Z");
        let days = last_days(pacific, now, 3);
        let dates: Vec<&str> = days.iter().map(|d| d.date.as_str()).collect();
        assert_eq!(dates, ["2026-10-31", "2026-11-01", "2026-11-02"]);
        let starts: Vec<u64> = days.iter().map(|d| d.start_ms).collect();
        assert_eq!(
            starts,
            [
                ms("2026-10-31T07:00:00Z"),
                ms("2026-11-01T07:00:00Z"),
                ms("2026-11-02T08:00:00Z")
            ]
        );
        assert!(days[2].start_ms <= now && now < next_midnight_ms(pacific, now));
        // Exactly at midnight, the day that begins is today.
        let utc = last_days(chrono_tz::UTC, ms("2026-12-02T00:00:00Z"), 1);
        assert_eq!(
            utc,
            [Day {
                date: "2026-12-02".into(),
                start_ms: ms("2026-12-02T00:00:00Z")
            }]
        );
        assert!(last_days(chrono_tz::UTC, now, 0).is_empty());
    }

    #[test]
    fn http_dates_parse_and_other_text_does_not() {
        assert_eq!(
            parse_http_date_ms("Wed, 02 Dec 2026 07:28:00 GMT"),
            Some(ms("2026-12-02T07:28:00Z"))
        );
        for bad in ["", "120", "tomorrow", "Wed, 99 Dec 2026 07:28:00 GMT"] {
            assert_eq!(parse_http_date_ms(bad), None, "{bad}");
        }
    }
}
