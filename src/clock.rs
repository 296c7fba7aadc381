//! Wall-clock time as UTC calendar fields, for the two places that print a date (audit
//! records' RFC 3339 timestamps and spill files' names) without pulling in a date crate.
//!
//! Owns the one civil-from-days conversion. Does not own time zones (everything is UTC) nor
//! any parsing of dates.

use std::time::{SystemTime, UNIX_EPOCH};

/// A moment as UTC calendar fields (proleptic Gregorian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
    pub millis: u32,
}

impl Utc {
    /// `at` in UTC; a time before the epoch reads as the epoch.
    pub fn of(at: SystemTime) -> Self {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil_from_days(days as i64);
        Self {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
            millis: since.subsec_millis(),
        }
    }

    pub fn now() -> Self {
        Self::of(SystemTime::now())
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn rfc3339_millis(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millis
        )
    }

    /// `YYYYMMDD-HHMMSS`, for names a human lists.
    pub fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_dates_convert() {
        let at = |secs| Utc::of(UNIX_EPOCH + Duration::from_millis(secs));
        assert_eq!(at(0).rfc3339_millis(), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year), 12:34:56.789.
        assert_eq!(
            at(951_827_696_789).rfc3339_millis(),
            "2000-02-29T12:34:56.789Z"
        );
        // 2100-03-01: 2100 is not a leap year.
        assert_eq!(at(4_107_542_400_000).compact(), "21000301-000000");
        assert_eq!(at(1_796_169_600_000).compact(), "20261202-000000");
    }
}
