//! The `Range` request header (RFC 9110 §14): which bytes of a representation of a given size
//! to send. One satisfiable range -> 206 with it; several -> 206 multipart/byteranges (framing
//! in [`super::multipart`]); none satisfiable -> 416. A suffix range (`-n`, n > 0) of an empty
//! representation is satisfiable (RFC 9110 §14.1.1) but selects no byte, and no `Content-Range`
//! can name zero bytes: it gets 200 with the empty representation (as nginx answers). A server
//! may ignore Range, and this one does (200 with everything) for malformed or non-`bytes` ranges,
//! for more ranges than `max_ranges` (nginx `max_ranges`; 0 disables ranges), and for
//! overlapping sets (whose total can exceed the file: a known amplification attack, RFC 9110
//! §17.15).

/// Bytes `start..=end` of the representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    pub fn len(self) -> u64 {
        self.end - self.start + 1
    }

    pub fn is_empty(self) -> bool {
        false
    }
}

/// What to send for a representation of a given size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No (usable) range: 200 with the whole representation.
    Full,
    /// 206 with one `Content-Range`.
    One(ByteRange),
    /// 206 multipart/byteranges, parts in the order asked for (at least two, none overlapping).
    Many(Vec<ByteRange>),
    /// 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
}

enum Spec {
    /// `a-b` or `a-` (b = None).
    From(u64, Option<u64>),
    /// `-n`: the last n bytes.
    Suffix(u64),
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // Absurdly long numbers saturate: they still compare as "past the end".
    Some(s.parse::<u64>().unwrap_or(u64::MAX))
}

fn spec(s: &str) -> Option<Spec> {
    let (a, b) = s.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        return number(b).map(Spec::Suffix);
    }
    let start = number(a)?;
    if b.is_empty() {
        return Some(Spec::From(start, None));
    }
    let end = number(b)?;
    (end >= start).then_some(Spec::From(start, Some(end)))
}

/// The specs of a `bytes=` header value; None when the unit is not `bytes` or any element is
/// malformed (then the whole header is ignored).
fn specs(header: &str) -> Option<Vec<Spec>> {
    let h = header.trim();
    let set = h
        .get(..6)
        .filter(|u| u.eq_ignore_ascii_case("bytes="))
        .map(|_| &h[6..])?;
    let mut out = Vec::new();
    // Empty list elements are allowed (RFC 9110 §5.6.1).
    for el in set.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        out.push(spec(el)?);
    }
    (!out.is_empty()).then_some(out)
}

fn resolve(s: &Spec, size: u64) -> Option<ByteRange> {
    match *s {
        Spec::Suffix(0) => None,
        Spec::Suffix(_) if size == 0 => None,
        Spec::Suffix(n) => Some(ByteRange {
            start: size.saturating_sub(n),
            end: size - 1,
        }),
        Spec::From(start, _) if start >= size => None,
        Spec::From(start, end) => Some(ByteRange {
            start,
            end: end.unwrap_or(u64::MAX).min(size - 1),
        }),
    }
}

/// The one range a header asks for, when [`plan`] would honour it with `max_ranges`, written
/// plainly (`bytes=X-Y`, `bytes=X-`, `bytes=-N`: no spaces, no empty list elements, which some
/// servers refuse): what an origin answers with a plain 206 and a Content-Range. None for a
/// malformed header, several ranges or ranges off (the header is ignored).
pub fn single(header: Option<&str>, max_ranges: usize) -> Option<String> {
    if max_ranges == 0 {
        return None;
    }
    match header.and_then(specs)?.as_slice() {
        [Spec::From(a, Some(b))] => Some(format!("bytes={a}-{b}")),
        [Spec::From(a, None)] => Some(format!("bytes={a}-")),
        [Spec::Suffix(n)] => Some(format!("bytes=-{n}")),
        _ => None,
    }
}

/// The first byte of the one range a header asks for (`bytes=X-` or `bytes=X-Y`) when
/// [`plan`] would honour it with `max_ranges` (so never for a malformed header, which is
/// ignored); None for a suffix range, several ranges or no range, which need the size.
pub fn single_start(header: Option<&str>, max_ranges: usize) -> Option<u64> {
    match header.and_then(specs)?.as_slice() {
        [Spec::From(start, _)] if max_ranges >= 1 => Some(*start),
        _ => None,
    }
}

/// Evaluate a Range header value against a representation size.
pub fn plan(header: Option<&str>, size: u64, max_ranges: usize) -> Ranges {
    let Some(specs) = header.and_then(specs) else {
        return Ranges::Full;
    };
    if specs.len() > max_ranges {
        return Ranges::Full;
    }
    let mut ranges: Vec<ByteRange> = specs.iter().filter_map(|s| resolve(s, size)).collect();
    match ranges.len() {
        // RFC 9110 §14.1.1: "If the selected representation has zero length, the only
        // satisfiable form of range-spec is a suffix-range with a non-zero suffix-length."
        0 if size == 0 && specs.iter().any(|s| matches!(s, Spec::Suffix(n) if *n > 0)) => {
            return Ranges::Full
        }
        0 => return Ranges::Unsatisfiable,
        1 => return Ranges::One(ranges[0]),
        _ => {}
    }
    let mut sorted = ranges.clone();
    sorted.sort_by_key(|r| r.start);
    if sorted.windows(2).any(|w| w[1].start <= w[0].end) {
        return Ranges::Full;
    }
    ranges.shrink_to_fit();
    Ranges::Many(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(start: u64, end: u64) -> Ranges {
        Ranges::One(ByteRange { start, end })
    }

    fn p(h: &str, size: u64) -> Ranges {
        plan(Some(h), size, 16)
    }

    #[test]
    fn single_only_for_one_range_that_plan_honours() {
        let s = |h: &str, max| single(Some(h), max);
        assert_eq!(s("bytes=0-9", 1).as_deref(), Some("bytes=0-9"));
        assert_eq!(s("BYTES= 5- ", 1).as_deref(), Some("bytes=5-"));
        assert_eq!(s("bytes=-5", 1).as_deref(), Some("bytes=-5"));
        assert_eq!(
            s("bytes=0-1,", 1).as_deref(),
            Some("bytes=0-1"),
            "written plainly"
        );
        assert_eq!(s("bytes=,-0", 1).as_deref(), Some("bytes=-0"));
        assert_eq!(s("bytes=0-9", 0), None, "ranges turned off");
        for h in [
            "bytes=9-0",
            "bytes=abc-def",
            "bytes=",
            "bytes=0-1,5-6",
            "items=0-1",
        ] {
            assert_eq!(s(h, 2), None, "{h}");
        }
        assert_eq!(single(None, 1), None);
    }

    #[test]
    fn single_start_only_for_a_range_that_plan_honours() {
        let s = |h: &str, max| single_start(Some(h), max);
        assert_eq!(s("bytes=5-", 1), Some(5));
        assert_eq!(s("Bytes = 7-9 ", 1), None, "the unit is `bytes=`");
        assert_eq!(s("bytes= 7-9 ,", 1), Some(7));
        assert_eq!(s("bytes=2000000-1", 1), None, "last before first: ignored");
        assert_eq!(s("bytes=5-", 0), None, "ranges turned off");
        assert_eq!(s("bytes=-5", 1), None);
        assert_eq!(s("bytes=1-2,5-", 2), None);
        assert_eq!(s("items=5-", 1), None);
        assert_eq!(single_start(None, 1), None);
    }

    #[test]
    fn single_ranges() {
        assert_eq!(p("bytes=0-9", 100), one(0, 9));
        assert_eq!(p("bytes=0-1", 100), one(0, 1)); // Safari's probe
        assert_eq!(p("bytes=0-1", 1), one(0, 0));
        assert_eq!(p("bytes=90-", 100), one(90, 99));
        assert_eq!(p("bytes=90-1000", 100), one(90, 99));
        assert_eq!(p("bytes=-10", 100), one(90, 99));
        assert_eq!(p("bytes=-1000", 100), one(0, 99));
        assert_eq!(p("Bytes = 1-2", 100), Ranges::Full); // no space allowed before '='
        assert_eq!(p("BYTES=1-2", 100), one(1, 2));
        assert_eq!(p("bytes=100-", 100), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=-0", 100), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=0-", 0), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=0-0", 0), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=-0", 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn a_suffix_of_an_empty_representation_is_satisfiable() {
        // RFC 9110 §14.1.1: satisfiable, but there is no byte to send: the whole (empty) file.
        assert_eq!(p("bytes=-5", 0), Ranges::Full);
        assert_eq!(p("bytes=-1", 0), Ranges::Full);
        assert_eq!(p("bytes=0-,-5", 0), Ranges::Full);
        assert_eq!(p("bytes=-5,-3", 0), Ranges::Full);
        assert_eq!(p("bytes=0-", 0), Ranges::Unsatisfiable);
        assert_eq!(
            p("bytes=99999999999999999999999-", 100),
            Ranges::Unsatisfiable
        );
    }

    #[test]
    fn ignored_ranges() {
        assert_eq!(plan(None, 100, 16), Ranges::Full);
        assert_eq!(p("items=0-1", 100), Ranges::Full);
        assert_eq!(p("bytes=9-1", 100), Ranges::Full);
        assert_eq!(p("bytes=x-1", 100), Ranges::Full);
        assert_eq!(p("bytes", 100), Ranges::Full);
        assert_eq!(p("bytes=", 100), Ranges::Full);
        assert_eq!(p("bytes=0-1,x", 100), Ranges::Full);
        assert_eq!(plan(Some("bytes=0-1"), 100, 0), Ranges::Full); // max_ranges = 0: no ranges
    }

    #[test]
    fn multiple_ranges() {
        let r = |start, end| ByteRange { start, end };
        for (header, want) in [
            ("bytes=0-1,5-6", vec![r(0, 1), r(5, 6)]),
            // Client order is kept; suffixes resolve against the size.
            ("bytes=-5, 0-0", vec![r(95, 99), r(0, 0)]),
            // Empty list elements are skipped.
            ("bytes=0-1,,5-6,", vec![r(0, 1), r(5, 6)]),
            // Adjacent is not overlapping.
            ("bytes=0-4,5-9", vec![r(0, 4), r(5, 9)]),
        ] {
            assert_eq!(p(header, 100), Ranges::Many(want), "{header}");
        }
        // Unsatisfiable members are dropped; one left is a plain 206.
        assert_eq!(p("bytes=0-1,200-300", 100), one(0, 1));
        assert_eq!(p("bytes=200-300,400-", 100), Ranges::Unsatisfiable);
    }

    #[test]
    fn abusive_sets_get_the_whole_file() {
        // Overlapping (total larger than the file is only possible with overlaps).
        assert_eq!(p("bytes=0-50,40-99", 100), Ranges::Full);
        assert_eq!(p("bytes=0-,0-", 100), Ranges::Full);
        assert_eq!(p("bytes=-60,0-50", 100), Ranges::Full);
        assert_eq!(p("bytes=0-1,0-1", 100), Ranges::Full);
        // More ranges than max_ranges.
        let many = (0..17)
            .map(|i| format!("{}-{}", i * 2, i * 2))
            .collect::<Vec<_>>();
        let h = format!("bytes={}", many.join(","));
        assert_eq!(p(&h, 100), Ranges::Full);
        assert!(matches!(plan(Some(&h), 100, 17), Ranges::Many(v) if v.len() == 17));
    }
}
