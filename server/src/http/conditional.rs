//! Validators and conditional requests (RFC 9110 §8.8, §13): the ETag and Last-Modified we send
//! and the evaluation of If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since and
//! If-Range in the order of §13.2.2. Pure functions: the caller passes the current time.

use super::date;
use super::response::push_hex;

/// What identifies one version of a file for its ETag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileVersion {
    pub ino: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Its nanoseconds (0..1e9).
    pub mtime_nsec: u32,
    pub size: u64,
}

/// The entity tag of a file. `"<mtime hex>-<size hex>"` is the shape nginx uses; with
/// `with_inode` it is `"<inode hex>-<mtime hex>[.<nsec hex>]-<size hex>"`, so a file replaced
/// by another one of the same size and (pinned, e.g. 0 or 1 from an image build) mtime never
/// matches the old tag, and one rewritten in place within the same second does not either (a
/// strong tag must change with the bytes: an If-Range resume would splice two versions). The
/// nanoseconds are left out when 0 (pinned mtimes) and in nginx's shape (replicas of the same
/// files on other disks must send equal tags; copies rarely keep nanoseconds). `coding` (`br`,
/// `zstd`, `gzip`) marks a precompressed sibling's tag.
pub fn entity_tag(v: FileVersion, with_inode: bool, coding: Option<&str>) -> String {
    let mut t = String::with_capacity(40);
    t.push('"');
    if with_inode {
        push_hex(&mut t, v.ino);
        t.push('-');
    }
    // Signed, as nginx's `%xT` prints it: mtimes before 1970 (archives, `touch -d @-1`) keep
    // distinct tags (clamped to 0 they all matched one another).
    if v.mtime < 0 {
        t.push('-');
    }
    push_hex(&mut t, v.mtime.unsigned_abs());
    if with_inode && v.mtime_nsec != 0 {
        t.push('.');
        push_hex(&mut t, u64::from(v.mtime_nsec));
    }
    t.push('-');
    push_hex(&mut t, v.size);
    if let Some(c) = coding {
        t.push('-');
        t.push_str(c);
    }
    t.push('"');
    t
}

/// The Last-Modified of a file modified at `mtime` in a response dated `now` (both seconds since
/// the epoch): the mtime, or `now` when the mtime is later (RFC 9110 §8.8.2.1: an origin server
/// MUST NOT send a Last-Modified later than its Date, and replaces a future one with the Date;
/// a clock set wrong where the file was written, or an archive's times, give such mtimes). The
/// value the preconditions compare with ([`Current::last_modified`]) must be this one, so that
/// a date echoed from a response means what that response said. For a file from the future it
/// is each response's own Date: an If-Modified-Since echoed from an earlier second is older
/// than it (200, not 304: nothing shows the file unchanged since then; its ETag, made from the
/// real mtime, still revalidates), and such a date never satisfies If-Range ([`evaluate`]).
pub fn last_modified(mtime: i64, now: i64) -> i64 {
    mtime.min(now)
}

/// The request's precondition header fields (trimmed values, as received).
#[derive(Debug, Clone, Copy, Default)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a str>,
    pub if_unmodified_since: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub if_range: Option<&'a str>,
}

/// The selected representation's validators.
#[derive(Debug, Clone, Copy)]
pub struct Current<'a> {
    /// Strong ETag, quoted.
    pub etag: &'a str,
    /// Last-Modified as sent, seconds since the epoch (for a file: [`last_modified`], never later
    /// than `now`); None when it is not sent.
    pub last_modified: Option<i64>,
    /// Whether `last_modified` is a strong validator (§8.8.2.2), as an If-Range date must be:
    /// [`file_date_is_strong`] for a file served from its disk, [`answer_date_is_strong`] for
    /// an origin's answer (a cache entry, or one passed through).
    pub last_modified_strong: bool,
}

impl<'a> Current<'a> {
    /// A file's validators at `now`: `last_modified` as [`last_modified`] makes it.
    pub fn of_file(etag: &'a str, last_modified: i64, now: i64) -> Current<'a> {
        Current {
            etag,
            last_modified: Some(last_modified),
            last_modified_strong: file_date_is_strong(last_modified, now),
        }
    }

    /// An origin answer's validators: its ETag (None: it has none, which nothing matches), and
    /// its Last-Modified, strong when its Date is later ([`answer_date_is_strong`]).
    pub fn of_answer(
        etag: Option<&'a str>,
        last_modified: Option<&str>,
        date_header: Option<&str>,
    ) -> Current<'a> {
        let lm = last_modified.and_then(date::parse);
        Current {
            // An absent ETag never matches ("-" is no entity tag).
            etag: etag.unwrap_or("-"),
            last_modified: lm,
            last_modified_strong: answer_date_is_strong(lm, date_header.and_then(date::parse)),
        }
    }
}

/// Is a file's Last-Modified `lm` strong in a response at `now` (seconds)? When it is a whole
/// second before `now`'s second, so at least one second passed since the modification whatever
/// the fractions (with the previous second, a file rewritten twice in it, 0.1 s before a
/// request in the next one, would pass). A Last-Modified of the current second may still
/// change within it, and one clamped to `now` ([`last_modified`]: the file's mtime is in the
/// future) is no modification time at all.
pub fn file_date_is_strong(lm: i64, now: i64) -> bool {
    lm + 1 < now
}

/// Is an origin answer's Last-Modified `lm` strong? When its Date `date` is at least one second
/// later (§8.8.2.2: a Last-Modified is implicitly weak, since the representation may have
/// changed twice within that second; without a parseable Date nothing shows it). A cache holds
/// the answer as it was at its Date, whatever its own clock says now.
pub fn answer_date_is_strong(lm: Option<i64>, date: Option<i64>) -> bool {
    matches!((lm, date), (Some(lm), Some(d)) if d > lm)
}

/// The answer to a request's preconditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Serve normally; `range` false means a Range header must be ignored (If-Range failed).
    Proceed { range: bool },
    /// 304 (GET/HEAD whose If-None-Match or If-Modified-Since says the client is current).
    NotModified,
    /// 412.
    Failed,
}

/// An entity tag without its weak marker (`W/"x"` -> `"x"`), trimmed: what the weak
/// comparison compares (RFC 9110 §8.8.3.2).
pub fn weak_opaque(tag: &str) -> &str {
    let t = tag.trim();
    t.strip_prefix("W/").unwrap_or(t)
}

/// The entity tags of a comma list, trimmed: split at the commas outside quotes, since an
/// opaque tag may hold one (`"v1,x"`, RFC 9110 §8.8.3: etagc includes `,`).
fn entity_tags(field: &str) -> impl Iterator<Item = &str> {
    let mut rest = field;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let mut quoted = false;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c == ',' && !quoted
            })
            .map_or(rest.len(), |(i, _)| i);
        let tag = rest[..end].trim();
        rest = rest.get(end + 1..).unwrap_or("");
        if !tag.is_empty() {
            return Some(tag);
        }
    })
}

/// `*` or a comma list of entity tags; `strong` selects the strong comparison (§8.8.3.2).
fn list_matches(field: &str, etag: &str, strong: bool) -> bool {
    if field.trim() == "*" {
        return true;
    }
    entity_tags(field).any(|t| {
        if strong {
            !t.starts_with("W/") && t == etag
        } else {
            weak_opaque(t) == weak_opaque(etag)
        }
    })
}

/// Evaluate the preconditions of a request for an existing representation (§13.2.2).
/// `get_or_head`: the method is GET or HEAD. `now`: the server's clock (seconds).
pub fn evaluate(
    c: &Conditions<'_>,
    cur: &Current<'_>,
    get_or_head: bool,
    now: i64,
) -> Precondition {
    // 1. If-Match (strong comparison), else 2. If-Unmodified-Since.
    if let Some(im) = c.if_match {
        if !list_matches(im, cur.etag, true) {
            return Precondition::Failed;
        }
    } else if let (Some(ius), Some(lm)) = (
        c.if_unmodified_since.and_then(date::parse),
        cur.last_modified,
    ) {
        if lm > ius {
            return Precondition::Failed;
        }
    }
    // 3. If-None-Match (weak comparison), else 4. If-Modified-Since (GET/HEAD only; a date later
    // than our clock is not a date we could have sent, so it is ignored, §13.1.3).
    if let Some(inm) = c.if_none_match {
        if list_matches(inm, cur.etag, false) {
            return if get_or_head {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if get_or_head {
        if let (Some(ims), Some(lm)) =
            (c.if_modified_since.and_then(date::parse), cur.last_modified)
        {
            if ims <= now && lm <= ims {
                return Precondition::NotModified;
            }
        }
    }
    // 5. If-Range decides whether a Range applies.
    Precondition::Proceed {
        range: range_applies(c.if_range, cur),
    }
}

/// True when a Range header may be honoured: no If-Range, or If-Range names the current strong
/// ETag, or exactly the current Last-Modified date when that date is strong (§13.1.5,
/// [`Current::last_modified_strong`]). A range of a weak date could splice two versions, so it
/// gets the whole representation.
fn range_applies(if_range: Option<&str>, cur: &Current<'_>) -> bool {
    match if_range.map(str::trim) {
        None => true,
        Some(v) if v.starts_with('"') => v == cur.etag,
        Some(v) if v.starts_with("W/") => false,
        Some(v) => match (cur.last_modified, date::parse(v)) {
            (Some(lm), Some(d)) => d == lm && cur.last_modified_strong,
            _ => false,
        },
    }
}

/// True when an origin's response carries a strong validator (RFC 9110 §8.8.1): a strong
/// ETag, or else a Last-Modified that its Date shows to be at least one second old (§8.8.2.2:
/// a Last-Modified is implicitly weak, since the representation may have changed twice within
/// that second; without a parseable Date nothing shows it). A cache may combine partial
/// responses into one only when they share a strong validator (RFC 9111 §3.4).
pub fn strong_validator(
    etag: Option<&str>,
    last_modified: Option<&str>,
    date_header: Option<&str>,
) -> bool {
    if let Some(t) = etag.map(str::trim) {
        if t.starts_with('"') {
            return true;
        }
    }
    answer_date_is_strong(
        last_modified.and_then(date::parse),
        date_header.and_then(date::parse),
    )
}

#[cfg(test)]
mod tests {
    use super::Precondition::*;
    use super::*;

    const LM: i64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
    const NOW: i64 = 1_700_000_000;
    const LM_DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";

    fn tag() -> String {
        entity_tag(
            FileVersion {
                ino: 0x2a,
                mtime: LM,
                mtime_nsec: 0,
                size: 10,
            },
            true,
            None,
        )
    }

    fn eval(c: Conditions<'_>, get: bool) -> Precondition {
        let t = tag();
        evaluate(&c, &Current::of_file(&t, LM, NOW), get, NOW)
    }

    const GO: Precondition = Proceed { range: true };

    #[test]
    fn etag_shapes() {
        let v = FileVersion {
            ino: 255,
            mtime: 1,
            mtime_nsec: 0,
            size: 16,
        };
        assert_eq!(entity_tag(v, false, None), "\"1-10\"");
        assert_eq!(entity_tag(v, true, None), "\"ff-1-10\"");
        assert_eq!(entity_tag(v, true, Some("br")), "\"ff-1-10-br\"");
        // Same size and mtime, different inode: different tags.
        assert_ne!(
            entity_tag(v, true, None),
            entity_tag(FileVersion { ino: 256, ..v }, true, None)
        );
        // Before 1970: signed, as nginx prints it, so two such mtimes never share a tag.
        assert_eq!(
            entity_tag(FileVersion { mtime: -5000, ..v }, false, None),
            "\"-1388-10\""
        );
        assert_eq!(
            entity_tag(FileVersion { mtime: -100, ..v }, true, None),
            "\"ff--64-10\""
        );
        assert_ne!(
            entity_tag(FileVersion { mtime: -1, ..v }, true, None),
            entity_tag(FileVersion { mtime: 0, ..v }, true, None)
        );
        // Rewritten within the same second: another tag (not in nginx's shape).
        let again = FileVersion {
            mtime_nsec: 0x1234,
            ..v
        };
        assert_eq!(entity_tag(again, true, None), "\"ff-1.1234-10\"");
        assert_ne!(entity_tag(again, true, None), entity_tag(v, true, None));
        assert_eq!(entity_tag(again, false, None), "\"1-10\"");
    }

    /// Conditions from (header, value) pairs.
    fn conditions<'a>(headers: &[(&str, &'a str)]) -> Conditions<'a> {
        let mut c = Conditions::default();
        for &(h, v) in headers {
            let slot = match h {
                "If-Match" => &mut c.if_match,
                "If-Unmodified-Since" => &mut c.if_unmodified_since,
                "If-None-Match" => &mut c.if_none_match,
                "If-Modified-Since" => &mut c.if_modified_since,
                "If-Range" => &mut c.if_range,
                _ => panic!("no precondition {h}"),
            };
            *slot = Some(v);
        }
        c
    }

    /// Each row: the request's preconditions, whether it is a GET/HEAD, the answer.
    type Row<'a> = (&'a [(&'a str, &'a str)], bool, Precondition);

    fn check(rows: &[Row<'_>]) {
        for (headers, get, want) in rows {
            let got = eval(conditions(headers), *get);
            assert_eq!(got, *want, "{headers:?}, GET/HEAD: {get}");
        }
    }

    #[test]
    fn if_none_match_and_if_modified_since() {
        let t = tag();
        let list = format!("\"x\", W/{t}");
        let (future, now) = (date::format(NOW + 3600), date::format(NOW));
        check(&[
            (&[("If-None-Match", &t)], true, NotModified),
            (&[("If-None-Match", &list)], true, NotModified),
            (&[("If-None-Match", "*")], true, NotModified),
            (&[("If-None-Match", "\"other\"")], true, GO),
            // If-None-Match present: If-Modified-Since is not looked at.
            (
                &[
                    ("If-None-Match", "\"other\""),
                    ("If-Modified-Since", LM_DATE),
                ],
                true,
                GO,
            ),
            (&[("If-Modified-Since", LM_DATE)], true, NotModified),
            (&[("If-Modified-Since", BEFORE)], true, GO),
            (&[("If-Modified-Since", "garbage")], true, GO),
            // Later than the server's clock: ignored (the client's clock is wrong).
            (&[("If-Modified-Since", &future)], true, GO),
            (&[("If-Modified-Since", &now)], true, NotModified),
            // Not GET/HEAD: If-None-Match match is 412, If-Modified-Since ignored.
            (&[("If-None-Match", &t)], false, Failed),
            (&[("If-Modified-Since", LM_DATE)], false, GO),
        ]);
    }

    /// An opaque tag may hold a comma (RFC 9110 §8.8.3): a list is split outside quotes only.
    #[test]
    fn a_tag_with_a_comma_is_one_tag() {
        let cur = |etag| Current {
            etag,
            last_modified: None,
            last_modified_strong: false,
        };
        let c = |inm: &'static str| Conditions {
            if_none_match: Some(inm),
            ..Conditions::default()
        };
        let tags: Vec<&str> = entity_tags(r#" "v1,x" ,, W/"a,b",  "c" "#).collect();
        assert_eq!(tags, [r#""v1,x""#, r#"W/"a,b""#, r#""c""#]);
        for field in [r#""v1,x""#, r#""zz", "v1,x""#, r#"W/"v1,x""#] {
            assert_eq!(
                evaluate(&c(field), &cur(r#""v1,x""#), true, NOW),
                NotModified,
                "{field}"
            );
        }
        assert_eq!(evaluate(&c(r#""v1""#), &cur(r#""v1,x""#), true, NOW), GO);
        assert_eq!(evaluate(&c(r#""x""#), &cur(r#""v1,x""#), true, NOW), GO);
        let im = Conditions {
            if_match: Some(r#""a", "v1,x""#),
            ..Conditions::default()
        };
        assert_eq!(evaluate(&im, &cur(r#""v1,x""#), true, NOW), GO);
    }

    #[test]
    fn if_match_and_if_unmodified_since_fail_with_412() {
        let t = tag();
        let (list, weak) = (format!("\"a\" , {t}"), format!("W/{t}"));
        check(&[
            (&[("If-Match", &t)], true, GO),
            (&[("If-Match", "*")], true, GO),
            (&[("If-Match", &list)], true, GO),
            (&[("If-Match", "\"a\"")], true, Failed),
            // Strong comparison: a weak tag never matches.
            (&[("If-Match", &weak)], true, Failed),
            (&[("If-Unmodified-Since", LM_DATE)], true, GO),
            (&[("If-Unmodified-Since", BEFORE)], true, Failed),
            (&[("If-Unmodified-Since", "not a date")], true, GO),
            // If-Match present: If-Unmodified-Since is not looked at.
            (
                &[("If-Match", &t), ("If-Unmodified-Since", BEFORE)],
                true,
                GO,
            ),
        ]);
    }

    #[test]
    fn order_of_evaluation() {
        let t = tag();
        check(&[
            // A failing If-Match wins over a matching If-None-Match (step 1 before step 3).
            (
                &[("If-Match", "\"a\""), ("If-None-Match", &t)],
                true,
                Failed,
            ),
            // A passing If-Match, then a matching If-None-Match: 304.
            (
                &[("If-Match", &t), ("If-None-Match", &t)],
                true,
                NotModified,
            ),
            // 304 is decided before If-Range.
            (
                &[("If-None-Match", &t), ("If-Range", "\"old\"")],
                true,
                NotModified,
            ),
        ]);
    }

    #[test]
    fn strong_validators() {
        let lm = LM_DATE;
        let later = "Sun, 06 Nov 1994 08:49:38 GMT";
        // (ETag, Last-Modified, Date, strong?)
        type Row<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, bool);
        let rows: &[Row<'_>] = &[
            (Some("\"abc\""), None, None, true),
            (Some(" \"abc\" "), None, None, true),
            (Some("W/\"abc\""), None, None, false),
            // A weak ETag does not hide a strong Last-Modified.
            (Some("W/\"abc\""), Some(lm), Some(later), true),
            (None, Some(lm), Some(later), true),
            // Date within the Last-Modified second, or missing, or unparseable: weak.
            (None, Some(lm), Some(lm), false),
            (None, Some(lm), None, false),
            (None, Some("yesterday"), Some(later), false),
            (None, Some(lm), Some(BEFORE), false),
            (None, None, Some(later), false),
            (None, None, None, false),
        ];
        for (etag, last_modified, date, want) in rows {
            assert_eq!(
                strong_validator(*etag, *last_modified, *date),
                *want,
                "{etag:?} {last_modified:?} {date:?}"
            );
        }
    }

    #[test]
    fn if_range() {
        let t = tag();
        let weak = format!("W/{t}");
        let ignored = Proceed { range: false };
        check(&[
            (&[("If-Range", &t)], true, GO),
            (&[("If-Range", "\"old\"")], true, ignored),
            (&[("If-Range", &weak)], true, ignored),
            (&[("If-Range", LM_DATE)], true, GO),
            (&[("If-Range", BEFORE)], true, ignored),
        ]);
        let none = evaluate(
            &Conditions {
                if_range: Some(LM_DATE),
                ..Default::default()
            },
            &Current {
                etag: &t,
                last_modified: None,
                last_modified_strong: false,
            },
            true,
            NOW,
        );
        assert_eq!(none, Proceed { range: false });
    }

    /// An origin answer's Last-Modified is strong only if its Date is a later second, whatever
    /// the clock of the cache evaluating an If-Range now.
    #[test]
    fn an_answers_date_decides_if_its_last_modified_is_strong() {
        let date = |t: i64| date::format(t);
        let (lm, later, same) = (date(LM), date(LM + 1), date(LM));
        let if_range = conditions(&[("If-Range", LM_DATE)]);
        let at = |d: Option<&str>| {
            evaluate(
                &if_range,
                &Current::of_answer(None, Some(&lm), d),
                true,
                NOW,
            )
        };
        assert_eq!(at(Some(&later)), GO);
        assert_eq!(at(Some(&same)), Proceed { range: false });
        assert_eq!(at(None), Proceed { range: false });
        assert_eq!(at(Some("garbage")), Proceed { range: false });
        // No ETag: nothing matches one.
        let c = conditions(&[("If-None-Match", "\"-\"")]);
        let cur = Current::of_answer(None, Some(&lm), Some(&later));
        assert_eq!(evaluate(&c, &cur, true, NOW), GO);
        assert!(answer_date_is_strong(Some(LM), Some(LM + 1)));
        assert!(!answer_date_is_strong(Some(LM), Some(LM)));
    }

    #[test]
    fn last_modified_is_never_later_than_the_date() {
        assert_eq!(last_modified(LM, NOW), LM);
        assert_eq!(last_modified(NOW, NOW), NOW);
        assert_eq!(last_modified(NOW + 86_400, NOW), NOW);
    }

    /// The preconditions of a file with mtime `mtime`, evaluated at `now` against the
    /// Last-Modified a response at `now` sends.
    fn eval_file(c: Conditions<'_>, mtime: i64, now: i64) -> Precondition {
        let t = tag();
        let cur = Current::of_file(&t, last_modified(mtime, now), now);
        evaluate(&c, &cur, true, now)
    }

    #[test]
    fn a_future_mtime_is_dated_now_and_is_never_a_strong_if_range() {
        let future = NOW + 3600;
        let (sent, later) = (date::format(NOW), date::format(NOW + 1));
        fn ims(d: &str) -> Conditions<'_> {
            conditions(&[("If-Modified-Since", d)])
        }
        fn if_range(d: &str) -> Conditions<'_> {
            conditions(&[("If-Range", d)])
        }
        // The date sent at NOW, echoed at NOW: 304; a second later the representation's
        // Last-Modified is that second's Date, later than the echo: 200.
        assert_eq!(eval_file(ims(&sent), future, NOW), NotModified);
        assert_eq!(eval_file(ims(&sent), future, NOW + 1), GO);
        assert_eq!(eval_file(ims(&later), future, NOW + 1), NotModified);
        // The real (future) mtime echoed: later than the clock, ignored.
        assert_eq!(eval_file(ims(&date::format(future)), future, NOW), GO);
        // If-Unmodified-Since of the date sent, a second later: the file is not shown unchanged.
        let ius = conditions(&[("If-Unmodified-Since", &sent)]);
        assert_eq!(eval_file(ius, future, NOW), GO);
        assert_eq!(eval_file(ius, future, NOW + 1), Failed);
        // If-Range: a clamped date is no strong validator, nor is an mtime of this second or
        // the previous one (a change at .9 of it is 0.1 s before a request at .0 of this one);
        // an mtime two seconds back, a whole second before this one began, is.
        let ignored = Proceed { range: false };
        assert_eq!(eval_file(if_range(&sent), future, NOW), ignored);
        assert_eq!(
            eval_file(if_range(&date::format(future)), future, NOW),
            ignored
        );
        assert_eq!(eval_file(if_range(&sent), NOW, NOW), ignored);
        assert_eq!(eval_file(if_range(&sent), NOW, NOW + 1), ignored);
        assert_eq!(eval_file(if_range(&sent), NOW, NOW + 2), GO);
        assert_eq!(eval_file(if_range(LM_DATE), LM, NOW), GO);
        // The ETag (from the real mtime) still matches while the file is unchanged.
        let t = tag();
        let inm = conditions(&[("If-None-Match", &t)]);
        assert_eq!(eval_file(inm, future, NOW + 1), NotModified);
    }
}
