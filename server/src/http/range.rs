//! The `Range` request header (RFC 9110 §14): one byte range -> 206, unsatisfiable -> 416.
//! Several ranges in one header are not served as multipart: the whole file is sent with 200
//! (a server may ignore Range). Malformed or non-`bytes` ranges are ignored likewise.

/// What to send for a file of a given size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOutcome {
    /// No (usable) range: 200 with the whole file.
    Full,
    /// 206 with bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// Evaluate a Range header value against a file size.
pub fn evaluate(header: Option<&str>, size: u64) -> RangeOutcome {
    let Some(h) = header else {
        return RangeOutcome::Full;
    };
    let h = h.trim();
    let Some(spec) = h
        .get(..6)
        .filter(|u| u.eq_ignore_ascii_case("bytes="))
        .map(|_| h[6..].trim())
    else {
        return RangeOutcome::Full;
    };
    if spec.contains(',') {
        return RangeOutcome::Full;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeOutcome::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            None
        } else {
            // Absurdly long numbers saturate: they still compare as "past the end".
            Some(s.parse::<u64>().unwrap_or(u64::MAX))
        }
    };
    match (a.is_empty(), b.is_empty()) {
        (true, true) => RangeOutcome::Full,
        // suffix: last N bytes
        (true, false) => match num(b) {
            None => RangeOutcome::Full,
            Some(0) => RangeOutcome::Unsatisfiable,
            Some(_) if size == 0 => RangeOutcome::Unsatisfiable,
            Some(n) => RangeOutcome::Partial {
                start: size.saturating_sub(n),
                end: size - 1,
            },
        },
        (false, _) => {
            let Some(start) = num(a) else {
                return RangeOutcome::Full;
            };
            let end = if b.is_empty() {
                u64::MAX
            } else {
                match num(b) {
                    Some(e) if e >= start => e,
                    _ => return RangeOutcome::Full,
                }
            };
            if start >= size {
                RangeOutcome::Unsatisfiable
            } else {
                RangeOutcome::Partial {
                    start,
                    end: end.min(size - 1),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{evaluate, RangeOutcome::*};

    #[test]
    fn single_ranges() {
        assert_eq!(
            evaluate(Some("bytes=0-9"), 100),
            Partial { start: 0, end: 9 }
        );
        assert_eq!(
            evaluate(Some("bytes=90-"), 100),
            Partial { start: 90, end: 99 }
        );
        assert_eq!(
            evaluate(Some("bytes=90-1000"), 100),
            Partial { start: 90, end: 99 }
        );
        assert_eq!(
            evaluate(Some("bytes=-10"), 100),
            Partial { start: 90, end: 99 }
        );
        assert_eq!(
            evaluate(Some("bytes=-1000"), 100),
            Partial { start: 0, end: 99 }
        );
        assert_eq!(evaluate(Some("bytes=100-"), 100), Unsatisfiable);
        assert_eq!(evaluate(Some("bytes=-0"), 100), Unsatisfiable);
        assert_eq!(evaluate(Some("bytes=0-"), 0), Unsatisfiable);
    }

    #[test]
    fn ignored_ranges() {
        assert_eq!(evaluate(None, 100), Full);
        assert_eq!(evaluate(Some("bytes=0-1,5-6"), 100), Full);
        assert_eq!(evaluate(Some("items=0-1"), 100), Full);
        assert_eq!(evaluate(Some("bytes=9-1"), 100), Full);
        assert_eq!(evaluate(Some("bytes=x-1"), 100), Full);
        assert_eq!(evaluate(Some("bytes"), 100), Full);
    }
}
