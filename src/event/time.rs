//! An event's `time` attribute with its text, written once where the event is built and
//! without an allocation: every binding sends the text, and each would otherwise format the
//! time anew per event.

use std::fmt;

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};

/// The longest text chrono writes for a `DateTime<Utc>` in RFC 3339 (a six-digit signed
/// year and nine fraction digits: `+262143-12-31T23:59:60.999999999+00:00`).
const LONGEST: usize = 38;

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EventTime {
    at: DateTime<Utc>,
    text: [u8; LONGEST],
    len: u8,
}

impl EventTime {
    pub fn new(at: DateTime<Utc>) -> EventTime {
        let mut text = [0u8; LONGEST];
        let len = match write_common(&at, &mut text) {
            Some(len) => len,
            None => {
                let slow = at.to_rfc3339_opts(SecondsFormat::AutoSi, false);
                text[..slow.len()].copy_from_slice(slow.as_bytes());
                slow.len()
            }
        };
        EventTime { at, text, len: len as u8 }
    }

    pub fn at(&self) -> DateTime<Utc> {
        self.at
    }

    /// The time as `DateTime::to_rfc3339` writes it (e.g. `2026-11-25T08:30:00.500+00:00`).
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and punctuation are ever written (`new`).
        std::str::from_utf8(&self.text[..usize::from(self.len)]).expect("an RFC 3339 time is ASCII")
    }
}

impl fmt::Debug for EventTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Writes the times of years 0 to 9999 outside a leap second, as chrono does; `None` for
/// the rest, which chrono writes.
fn write_common(at: &DateTime<Utc>, out: &mut [u8; LONGEST]) -> Option<usize> {
    let at = at.naive_utc();
    let year = u32::try_from(at.year()).ok().filter(|y| *y <= 9999)?;
    let nanos = at.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    *out = *b"0000-00-00T00:00:00.000000000+00:00\0\0\0";
    digits(&mut out[0..4], year);
    digits(&mut out[5..7], at.month());
    digits(&mut out[8..10], at.day());
    digits(&mut out[11..13], at.hour());
    digits(&mut out[14..16], at.minute());
    digits(&mut out[17..19], at.second());
    let fraction = match nanos {
        0 => 0,
        n if n % 1_000_000 == 0 => 3,
        n if n % 1_000 == 0 => 6,
        _ => 9,
    };
    let end = if fraction == 0 {
        19
    } else {
        digits(&mut out[20..20 + fraction], nanos / 10u32.pow(9 - fraction as u32));
        20 + fraction
    };
    out[end..end + 6].copy_from_slice(b"+00:00");
    Some(end + 6)
}

/// `value`'s last `out.len()` decimal digits, zero-padded.
fn digits(out: &mut [u8], mut value: u32) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn time(seconds: i64, nanos: u32) -> DateTime<Utc> {
        Utc.timestamp_opt(seconds, nanos).single().expect("a valid time")
    }

    #[test]
    fn each_precision_is_written_as_chrono_writes_it() {
        for (nanos, text) in [
            (0, "2026-11-25T08:30:00+00:00"),
            (500_000_000, "2026-11-25T08:30:00.500+00:00"),
            (123_456_000, "2026-11-25T08:30:00.123456+00:00"),
            (123_456_789, "2026-11-25T08:30:00.123456789+00:00"),
        ] {
            let at = time(1_795_595_400, nanos);
            assert_eq!(EventTime::new(at).as_str(), text);
            assert_eq!(at.to_rfc3339(), text);
        }
    }

    #[test]
    fn a_leap_second_is_written_by_chrono() {
        let at = time(1_795_595_399, 1_000_000_001);
        assert_eq!(EventTime::new(at).as_str(), "2026-11-25T08:29:60.000000001+00:00");
        assert_eq!(at.to_rfc3339(), "2026-11-25T08:29:60.000000001+00:00");
    }

    #[test]
    fn years_beyond_four_digits_are_written_by_chrono() {
        for at in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC, time(-62_167_219_201, 1)] {
            assert_eq!(EventTime::new(at).as_str(), at.to_rfc3339());
            assert_eq!(EventTime::new(at).at(), at);
        }
    }

    proptest! {
        #[test]
        fn any_time_is_written_as_chrono_writes_it(
            seconds in -62_167_219_200i64..253_402_300_800,
            nanos in prop_oneof![Just(0u32), (0u32..1000).prop_map(|m| m * 1_000_000), (0u32..1_000_000).prop_map(|u| u * 1000), 0u32..2_000_000_000],
        ) {
            let Some(at) = Utc.timestamp_opt(seconds, nanos).single() else { return Ok(()) };
            let time = EventTime::new(at);
            prop_assert_eq!(time.as_str(), at.to_rfc3339());
        }
    }
}
