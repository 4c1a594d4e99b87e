//! HTTP dates (IMF-fixdate, RFC 9110 §5.6.7): formatting `Sun, 06 Nov 1994 08:49:37 GMT` and
//! parsing it back (plus the obsolete RFC 850 and asctime forms). Pure functions, no clock
//! except [`now_header`], which caches the formatted current second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Format seconds since the epoch as an IMF-fixdate.
pub fn format(secs: i64) -> String {
    let mut out = String::with_capacity(29);
    push(&mut out, secs);
    out
}

thread_local! {
    /// The last date [`push`] formatted on this thread (a hot file's Last-Modified repeats).
    static LAST: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
}

/// Append the IMF-fixdate of `secs` to `out` (no formatting machinery: it runs per response;
/// the last one formatted on this thread is reused).
pub fn push(out: &mut String, secs: i64) {
    LAST.with_borrow_mut(|(at, text)| {
        if *at != secs {
            text.clear();
            push_uncached(text, secs);
            *at = secs;
        }
        out.push_str(text);
    });
}

fn push_uncached(out: &mut String, secs: i64) {
    fn two(out: &mut String, v: i64) {
        out.push(char::from(b'0' + (v / 10 % 10) as u8));
        out.push(char::from(b'0' + (v % 10) as u8));
    }
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    out.push_str(DAYS[days.rem_euclid(7) as usize]);
    out.push_str(", ");
    two(out, d as i64);
    out.push(' ');
    out.push_str(MONTHS[(m - 1) as usize]);
    out.push(' ');
    if (0..10_000).contains(&y) {
        two(out, y / 100);
        two(out, y % 100);
    } else {
        // Outside IMF-fixdate's four digits; never produced by a sane clock or file time.
        out.push_str(&y.to_string());
    }
    out.push(' ');
    two(out, rem / 3600);
    out.push(':');
    two(out, rem % 3600 / 60);
    out.push(':');
    two(out, rem % 60);
    out.push_str(" GMT");
}

fn month(s: &str) -> Option<u32> {
    MONTHS.iter().position(|m| *m == s).map(|i| i as u32 + 1)
}

/// Exactly `min..=max` ASCII digits (no sign, no space), as a number.
fn digits(s: &str, min: usize, max: usize) -> Option<i64> {
    let ok = (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| s.parse().ok()).flatten()
}

/// `HH:MM:SS`, two digits each (a leap second is allowed).
fn hms(s: &str) -> Option<i64> {
    let mut it = s.split(':').map(|p| digits(p, 2, 2));
    let (h, m, sec) = (it.next()??, it.next()??, it.next()??);
    if it.next().is_some() || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some(h * 3600 + m * 60 + sec)
}

fn leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// Seconds since the epoch of a date whose parts are checked: the day exists in its month
/// (no 31 February) and the year has four digits (so nothing overflows).
fn assemble(y: i64, m: u32, d: i64, t: i64) -> Option<i64> {
    let days_in_month = match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(0..=9999).contains(&y) || !(1..=days_in_month).contains(&d) {
        return None;
    }
    Some(days_from_civil(y, m, d as u32) * 86_400 + t)
}

/// Parse an HTTP date to seconds since the epoch; None when malformed (then a `Date` counts
/// as absent and an `Expires` as already past, RFC 9111 §5.3).
pub fn parse(s: &str) -> Option<i64> {
    parse_at(s, unix_now_ms() / 1000)
}

/// [`parse`] with the clock given: an RFC 850 date's two-digit year is the one of its century
/// and the last that is not more than 50 years after `now` (RFC 9110 §5.6.7).
fn parse_at(s: &str, now: i64) -> Option<i64> {
    let s = s.trim();
    let parts: Vec<&str> = s.split_ascii_whitespace().collect();
    match parts.as_slice() {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        [_wd, d, mon, y, t, "GMT"] => {
            assemble(digits(y, 4, 4)?, month(mon)?, digits(d, 2, 2)?, hms(t)?)
        }
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        [_wd, dmy, t, "GMT"] => {
            let mut it = dmy.split('-');
            let (d, mon, y) = (it.next()?, it.next()?, it.next()?);
            if it.next().is_some() {
                return None;
            }
            let (ny, nm, nd) = civil_from_days(now.div_euclid(86_400));
            let y = ny - ny % 100 + digits(y, 2, 2)?;
            let (m, d, t) = (month(mon)?, digits(d, 2, 2)?, hms(t)?);
            let at = assemble(y, m, d, t)?;
            // More than 50 years ahead of now (the date, not just its year): the last century.
            let limit = days_from_civil(ny + 50, nm, nd) * 86_400 + now.rem_euclid(86_400);
            if at > limit {
                assemble(y - 100, m, d, t)
            } else {
                Some(at)
            }
        }
        // asctime: Sun Nov  6 08:49:37 1994
        [_wd, mon, d, t, y] => assemble(digits(y, 4, 4)?, month(mon)?, digits(d, 1, 2)?, hms(t)?),
        _ => None,
    }
}

thread_local! {
    static CACHED: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
}

/// The `Date` header value for now, formatted at most once per second per thread.
pub fn now_header() -> String {
    let mut out = String::with_capacity(29);
    push_now(&mut out);
    out
}

/// Milliseconds since the Unix epoch: the clock of every fresh/stale decision and of the
/// node's own time-outs that must agree across threads.
pub fn unix_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(i64::MAX as u128 / 4) as i64)
}

/// Append the `Date` header value for now to `out` (formatted at most once per second per
/// thread).
pub fn push_now(out: &mut String) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    push_date(out, now);
}

/// Append the `Date` header value of the second `now` (a clock reading the caller took and
/// compares with, e.g. a Last-Modified clamped to it), cached per thread like [`push_now`].
pub fn push_date(out: &mut String, now: i64) {
    CACHED.with_borrow_mut(|c| {
        if c.0 != now {
            c.0 = now;
            c.1.clear();
            push_uncached(&mut c.1, now);
        }
        out.push_str(&c.1);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_rfc_example() {
        assert_eq!(format(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse("Sun Nov  6 08:49:37 1994"), Some(784_111_777));
        assert_eq!(parse("yesterday"), None);
        assert_eq!(parse("Sun, 06 Nov 1994 25:49:37 GMT"), None);
    }

    /// What is not a date is None, never a wrapped or shifted one.
    #[test]
    fn refuses_dates_that_do_not_exist_or_do_not_fit() {
        for bad in [
            "Fri, 31 Dec 9223372036854775807 23:59:59 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sat, 05 Dec 2026 -3:00:00 GMT",
            "Sat, 05 Dec 2026 +3:00:00 GMT",
            "Sat, 31 Feb 2026 00:00:00 GMT",
            "Sat, 29 Feb 2025 00:00:00 GMT",
            "Sat, 05 Dec 12026 00:00:00 GMT",
            "Sat, +5 Dec 2026 00:00:00 GMT",
            "Sat, 05 Dec 2026 0:00:00 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sunday, 06-Nov-94-1 08:49:37 GMT",
            "Sun Nov 31 08:49:37 1994",
            "Sun Nov  6 08:49:37 99999999999999",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse("Thu, 29 Feb 2024 00:00:00 GMT"), Some(1_709_164_800));
    }

    /// RFC 850's two-digit years: the latest year not more than 50 years ahead.
    #[test]
    fn two_digit_years_are_read_against_the_clock() {
        let now = parse("Sat, 05 Dec 2026 00:00:00 GMT").expect("date");
        let year = |s: &str| civil_from_days(parse_at(s, now).expect(s).div_euclid(86_400)).0;
        assert_eq!(year("Friday, 01-Jan-75 00:00:00 GMT"), 2075);
        assert_eq!(year("Friday, 01-Jan-76 00:00:00 GMT"), 2076);
        // The date decides, not its year: 31 December 2076 is more than 50 years ahead.
        assert_eq!(year("Thursday, 31-Dec-76 00:00:00 GMT"), 1976);
        assert_eq!(year("Friday, 01-Jan-77 00:00:00 GMT"), 1977);
        assert_eq!(year("Friday, 01-Jan-94 00:00:00 GMT"), 1994);
        assert_eq!(year("Friday, 01-Jan-00 00:00:00 GMT"), 2000);
    }

    #[test]
    fn round_trips_many_dates() {
        for secs in (0..4_000_000_000i64).step_by(86_400 * 37 + 3_601) {
            assert_eq!(parse(&format(secs)), Some(secs), "{}", format(secs));
        }
    }
}
