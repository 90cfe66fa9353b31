//! Date formats (whimbrel-architecture.md, "Notes on date formats"): every
//! time is stored as a UTC date list `[Y, M, D, h, m, s]` (month and day
//! 1-based, `s` may be fractional) and as Unix epoch seconds in a `_epoch`
//! attribute (design.md § 2.5).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// UTC date list `[year, month (Jan = 1), day (1 = 1), hour (24h), minute,
/// second]`. Clients may send a fractional second, so every element is read
/// as a number; the engine writes whole seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DateList(pub Vec<f64>);

/// A moment as both representations: the date list and epoch seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    /// Seconds since 1970-01-01T00:00:00Z.
    pub epoch: i64,
}

impl Timestamp {
    /// The current time, whole seconds.
    pub fn now() -> Self {
        Timestamp {
            epoch: OffsetDateTime::now_utc().unix_timestamp(),
        }
    }

    /// A timestamp at `epoch` seconds.
    pub fn from_epoch(epoch: i64) -> Self {
        Timestamp { epoch }
    }

    /// The date list for this moment, in UTC.
    pub fn date_list(self) -> DateList {
        let t =
            OffsetDateTime::from_unix_timestamp(self.epoch).unwrap_or(OffsetDateTime::UNIX_EPOCH);
        DateList(vec![
            f64::from(t.year()),
            f64::from(u8::from(t.month())),
            f64::from(t.day()),
            f64::from(t.hour()),
            f64::from(t.minute()),
            f64::from(t.second()),
        ])
    }
}

impl DateList {
    /// Epoch seconds of this date list, or `None` if it is not six numbers
    /// forming a valid UTC date. Fractional seconds are truncated.
    pub fn epoch(&self) -> Option<i64> {
        let v = &self.0;
        if v.len() != 6 || v[..5].iter().any(|x| x.fract() != 0.0) {
            return None;
        }
        let month = time::Month::try_from(u8::try_from(v[1] as i64).ok()?).ok()?;
        let date =
            time::Date::from_calendar_date(v[0] as i32, month, u8::try_from(v[2] as i64).ok()?)
                .ok()?;
        let t = time::Time::from_hms(
            u8::try_from(v[3] as i64).ok()?,
            u8::try_from(v[4] as i64).ok()?,
            u8::try_from(v[5].trunc() as i64).ok()?,
        )
        .ok()?;
        Some(date.with_time(t).assume_utc().unix_timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_list_matches_the_shell_example() {
        // `date --date=@1700000000 +"[%Y,%-m,%-d,%-H,%-M,%-S]"` = [2023,11,14,22,13,20]
        let t = Timestamp::from_epoch(1_700_000_000);
        assert_eq!(
            t.date_list(),
            DateList(vec![2023.0, 11.0, 14.0, 22.0, 13.0, 20.0])
        );
        assert_eq!(t.date_list().epoch(), Some(1_700_000_000));
    }

    #[test]
    fn fractional_seconds_and_bad_lists() {
        assert_eq!(
            DateList(vec![2023.0, 11.0, 14.0, 22.0, 13.0, 20.75]).epoch(),
            Some(1_700_000_000)
        );
        assert_eq!(
            DateList(vec![2023.0, 13.0, 14.0, 22.0, 13.0, 20.0]).epoch(),
            None
        );
        assert_eq!(DateList(vec![2023.0, 11.0]).epoch(), None);
    }
}
