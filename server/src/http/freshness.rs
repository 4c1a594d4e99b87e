//! Whether a shared cache may store an origin response, and for how long it stays fresh
//! (RFC 9111 §3, §4.2, §5.2; RFC 5861 for stale-while-revalidate / stale-if-error), under the
//! route's `[routes.cache]` policy. Pure: status + headers + policy + now in, a decision out.
//!
//! Lifetime order: `s-maxage` > `max-age` > `Expires` − `Date` > the policy's `valid` rule for
//! the status. `ignore_origin_headers` skips the origin's Cache-Control, Expires and Age (but
//! Set-Cookie and Vary still forbid storing, and so does a request's Authorization without the
//! origin's permission to share). The current age (`Age`, or `now − Date` when larger) is
//! subtracted from the lifetime.
//!
//! Requests with `Authorization` (§3.5): an answer to one is stored, and a stored answer used
//! for one, only when its Cache-Control says `public`, `s-maxage` or `must-revalidate`
//! ([`shared_with_authorization`]).

use crate::config::CachePolicy;
use http::header::{AGE, CACHE_CONTROL, DATE, EXPIRES, PRAGMA, SET_COOKIE, VARY};
use http::HeaderMap;

/// Why a response is passed through without being stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotStorable {
    /// `Cache-Control: no-store`.
    NoStore,
    /// `Cache-Control: private`.
    Private,
    /// The response sets a cookie.
    SetCookie,
    /// `Vary` names something other than Accept-Encoding (or `*`).
    Vary(String),
    /// The request carried Authorization and the response does not allow sharing it
    /// (`public`, `s-maxage` or `must-revalidate`).
    Authorization,
    /// Neither the origin nor a `valid` rule gives this status a lifetime (or the status is
    /// never stored, like 304 or 1xx).
    NoLifetime(u16),
}

impl NotStorable {
    /// A short reason for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            NotStorable::NoStore => "no-store",
            NotStorable::Private => "private",
            NotStorable::SetCookie => "set-cookie",
            NotStorable::Vary(_) => "vary",
            NotStorable::Authorization => "authorization",
            NotStorable::NoLifetime(_) => "no lifetime",
        }
    }
}

/// How a storable response may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storable {
    /// Seconds from now during which it is served without asking the origin (0 = stale now).
    pub fresh_for: u64,
    /// Its age now, in seconds (the `Age` to add to when serving it).
    pub age: u64,
    /// Seconds after it goes stale during which it is still served while one background
    /// request revalidates it.
    pub stale_while_revalidate: u64,
    /// Seconds after it goes stale during which it is served when the origin fails (down,
    /// timeout, 5xx).
    pub stale_if_error: u64,
    /// `must-revalidate` / `proxy-revalidate` (or `s-maxage`, which implies it for a shared
    /// cache): once stale, never served without a successful revalidation (both stale windows
    /// are 0).
    pub must_revalidate: bool,
    /// `no-cache` (or `Pragma: no-cache` without Cache-Control): every use is revalidated first
    /// (`fresh_for` is 0).
    pub no_cache: bool,
}

/// The decision for one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    NotStorable(NotStorable),
    Storable(Storable),
}

/// The Cache-Control directives that matter to a shared cache.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Directives {
    no_store: bool,
    no_cache: bool,
    private: bool,
    public: bool,
    must_revalidate: bool,
    /// `must-revalidate` itself: with `public` and `s-maxage`, what lets an answer to an
    /// Authorization request be shared (§3.5); `proxy-revalidate` does not.
    must_revalidate_named: bool,
    max_age: Option<u64>,
    s_maxage: Option<u64>,
    swr: Option<u64>,
    sie: Option<u64>,
}

/// Parse every Cache-Control header (comma-separated, case-insensitive names, optional
/// `=value` possibly quoted). A malformed delta-seconds counts as 0 (RFC 9111 §1.2.2: treat
/// invalid freshness as stale). A line with bytes outside ASCII (allowed in a quoted string,
/// RFC 9110 §5.6.4) is read with them replaced: its `private` or `no-store` still counts.
fn directives(headers: &HeaderMap) -> Directives {
    let lines: Vec<std::borrow::Cow<'_, str>> = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()))
        .collect();
    parse_directives(lines.iter().map(|l| l.as_ref()))
}

/// The directives of these Cache-Control header values.
fn parse_directives<'a>(values: impl IntoIterator<Item = &'a str>) -> Directives {
    let mut d = Directives::default();
    for v in values {
        for item in split_list(v) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (item.trim(), None),
            };
            let secs = || value.map(delta_seconds).unwrap_or(0);
            match name.to_ascii_lowercase().as_str() {
                "no-store" => d.no_store = true,
                "no-cache" => d.no_cache = true,
                "private" => d.private = true,
                "public" => d.public = true,
                "must-revalidate" => {
                    d.must_revalidate = true;
                    d.must_revalidate_named = true;
                }
                "proxy-revalidate" => d.must_revalidate = true,
                // A directive given twice counts by its smallest value: RFC 9111 §4.2.1 has
                // the first one used or the response taken as stale; the smallest lies between
                // those two, never fresher than the first.
                "max-age" => smallest(&mut d.max_age, secs()),
                // It also means proxy-revalidate for a shared cache (RFC 9111 §5.2.2.10).
                "s-maxage" => {
                    smallest(&mut d.s_maxage, secs());
                    d.must_revalidate = true;
                }
                "stale-while-revalidate" => smallest(&mut d.swr, secs()),
                "stale-if-error" => smallest(&mut d.sie, secs()),
                _ => {}
            }
        }
    }
    d
}

/// `slot` becomes `v` when empty or larger.
fn smallest(slot: &mut Option<u64>, v: u64) {
    *slot = Some(slot.map_or(v, |m| m.min(v)));
}

impl Directives {
    /// §3.5: may an answer to a request with Authorization be shared?
    fn shareable_with_authorization(&self) -> bool {
        self.public || self.s_maxage.is_some() || self.must_revalidate_named
    }
}

/// Whether a response whose Cache-Control header values are `values` may be stored for, or
/// served to, a request carrying Authorization (RFC 9111 §3.5: `public`, `s-maxage` or
/// `must-revalidate`).
pub fn shared_with_authorization<'a>(values: impl IntoIterator<Item = &'a str>) -> bool {
    parse_directives(values).shareable_with_authorization()
}

/// Split a header list on commas outside quoted strings.
fn split_list(v: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in v.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&v[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&v[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// The largest delta-seconds taken: RFC 9111 §1.2.2 has a larger value, or one that overflows,
/// count as 2^31 (68 years: "very long", and an `Age` that grows from there never wraps).
const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// delta-seconds: digits, at most [`DELTA_SECONDS_MAX`].
fn delta_seconds(s: &str) -> u64 {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    s.parse::<u64>()
        .unwrap_or(DELTA_SECONDS_MAX)
        .min(DELTA_SECONDS_MAX)
}

fn header_str(headers: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether `Vary` values name `field` (no allocation: asked on hits).
pub fn varies_by<'h>(mut vary: impl Iterator<Item = &'h str>, field: &str) -> bool {
    vary.any(|v| v.split(',').any(|f| f.trim().eq_ignore_ascii_case(field)))
}

/// The `Vary` fields other than Accept-Encoding (and `Origin` with `cors_by_route`), if any.
fn vary_blocker(headers: &HeaderMap, cors_by_route: bool) -> Option<String> {
    let mut other = Vec::new();
    for v in headers.get_all(VARY) {
        let Ok(v) = v.to_str() else {
            return Some("(unreadable)".into());
        };
        for f in split_list(v) {
            let tolerated = f.eq_ignore_ascii_case("accept-encoding")
                || (cors_by_route && f.eq_ignore_ascii_case("origin"));
            if !tolerated {
                other.push(f.to_string());
            }
        }
    }
    (!other.is_empty()).then(|| other.join(", "))
}

/// Decide for one response. `authorized`: the request sent to the origin carried
/// Authorization. `cors_by_route`: the route answers CORS itself, replacing the origin's CORS
/// answer, so the origin's `Vary: Origin` (that answer's) does not keep it out of the cache.
/// `now`: when the answer's head arrived, seconds since the epoch; `response_delay`: seconds
/// from sending the request until then (added to the origin's `Age`, RFC 9111 §4.2.3).
pub fn evaluate(
    status: u16,
    headers: &HeaderMap,
    policy: &CachePolicy,
    authorized: bool,
    cors_by_route: bool,
    now: i64,
    response_delay: u64,
) -> Freshness {
    use Freshness::NotStorable as No;
    if status < 200 || status == 304 {
        return No(NotStorable::NoLifetime(status));
    }
    if headers.contains_key(SET_COOKIE) {
        return No(NotStorable::SetCookie);
    }
    if let Some(v) = vary_blocker(headers, cors_by_route) {
        return No(NotStorable::Vary(v));
    }
    let d = directives(headers);
    // The origin's permission to share an authorized answer counts even when its freshness
    // headers are ignored.
    if authorized && !d.shareable_with_authorization() {
        return No(NotStorable::Authorization);
    }
    if policy.ignore_origin_headers {
        return match policy.valid_for(status) {
            Some(secs) => Freshness::Storable(Storable {
                fresh_for: secs,
                age: 0,
                // A lifetime of 0 asks for every use to be revalidated (as below).
                stale_while_revalidate: if secs == 0 {
                    0
                } else {
                    policy.stale_while_revalidate_secs
                },
                stale_if_error: policy.stale_if_error_secs,
                must_revalidate: false,
                no_cache: false,
            }),
            None => No(NotStorable::NoLifetime(status)),
        };
    }
    if d.no_store {
        return No(NotStorable::NoStore);
    }
    if d.private {
        return No(NotStorable::Private);
    }
    let date = header_str(headers, DATE).and_then(super::date::parse);
    let expires = || -> Option<u64> {
        let raw = headers.get(EXPIRES)?;
        // An invalid Expires (such as "0", or bytes outside ASCII) means already expired
        // (RFC 9111 §5.3).
        let Some(exp) = raw.to_str().ok().and_then(super::date::parse) else {
            return Some(0);
        };
        Some((exp - date.unwrap_or(now)).max(0) as u64)
    };
    let from_origin = d.s_maxage.or(d.max_age).or_else(expires);
    let lifetime = from_origin.or_else(|| policy.valid_for(status));
    let Some(lifetime) = lifetime else {
        return No(NotStorable::NoLifetime(status));
    };
    let age_header = header_str(headers, AGE).map(|v| delta_seconds(v.trim()));
    let apparent = date.map_or(0, |d| (now - d).max(0) as u64);
    // RFC 9111 §4.2.3: the Age the origin sent was its age when the request was made, so the
    // time the answer took (`response_delay`, whole seconds) is added to it.
    let age = age_header
        .unwrap_or(0)
        .saturating_add(response_delay)
        .max(apparent);
    // HTTP/1.0 `Pragma: no-cache` counts only without Cache-Control (RFC 9111 §5.4).
    let pragma_no_cache = !headers.contains_key(CACHE_CONTROL)
        && header_str(headers, PRAGMA).is_some_and(|p| {
            split_list(p)
                .iter()
                .any(|x| x.eq_ignore_ascii_case("no-cache"))
        });
    let no_cache = d.no_cache || pragma_no_cache;
    let must_revalidate = d.must_revalidate || no_cache;
    // A lifetime of 0 (the origin's `max-age=0`, an Expires not after its Date, or the route's
    // `valid` rule with `secs = 0`) asks for every use to be revalidated: the route's default
    // stale-while-revalidate, meant for lifetimes that ran out, does not apply (the origin's own
    // `stale-while-revalidate` does).
    let stale_at_once = lifetime == 0;
    let (swr, sie) = if must_revalidate {
        (0, 0)
    } else {
        let default_swr = if stale_at_once {
            0
        } else {
            policy.stale_while_revalidate_secs
        };
        (
            d.swr.unwrap_or(default_swr),
            d.sie.unwrap_or(policy.stale_if_error_secs),
        )
    };
    // An answer older than its lifetime went stale before it arrived: its stale windows
    // started then (RFC 5861 §3: the seconds after it becomes stale), not at its arrival.
    let overdue = age.saturating_sub(lifetime);
    let (swr, sie) = (swr.saturating_sub(overdue), sie.saturating_sub(overdue));
    Freshness::Storable(Storable {
        fresh_for: if no_cache {
            0
        } else {
            lifetime.saturating_sub(age)
        },
        age,
        stale_while_revalidate: swr,
        stale_if_error: sie,
        must_revalidate,
        no_cache,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ValidRule;

    const NOW: i64 = 1_700_000_000;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, v.parse().unwrap());
        }
        m
    }

    fn date(secs: i64) -> String {
        crate::http::date::format(secs)
    }

    fn eval(status: u16, pairs: &[(&'static str, &str)]) -> Freshness {
        evaluate(
            status,
            &h(pairs),
            &CachePolicy::default(),
            false,
            false,
            NOW,
            0,
        )
    }

    /// RFC 9111 §4.2.3: corrected_age_value = age_value + response_delay; the initial age is
    /// the larger of it and the apparent age (from Date).
    #[test]
    fn the_origin_age_counts_the_response_delay() {
        let p = CachePolicy::default();
        let hm = h(&[("cache-control", "max-age=12"), ("age", "10")]);
        assert_eq!(
            storable(evaluate(200, &hm, &p, false, false, NOW, 0)).age,
            10
        );
        assert_eq!(
            storable(evaluate(200, &hm, &p, false, false, NOW, 3)).age,
            13
        );
        // Without an Age, the delay alone; a Date further back wins.
        let date = super::super::date::format(NOW - 20);
        let hm = h(&[("cache-control", "max-age=12"), ("date", &date)]);
        assert_eq!(
            storable(evaluate(200, &hm, &p, false, false, NOW, 3)).age,
            20
        );
        let hm = h(&[("cache-control", "max-age=12")]);
        assert_eq!(
            storable(evaluate(200, &hm, &p, false, false, NOW, 3)).age,
            3
        );
    }

    fn storable(f: Freshness) -> Storable {
        match f {
            Freshness::Storable(s) => s,
            other => panic!("expected storable, got {other:?}"),
        }
    }

    fn refused(f: Freshness) -> NotStorable {
        match f {
            Freshness::NotStorable(r) => r,
            other => panic!("expected not storable, got {other:?}"),
        }
    }

    #[test]
    fn policy_defaults_by_status_when_the_origin_says_nothing() {
        let s = storable(eval(200, &[]));
        assert_eq!(s.fresh_for, 3600);
        assert_eq!(s.stale_while_revalidate, 60);
        assert_eq!(s.stale_if_error, 86_400);
        assert!(!s.must_revalidate && !s.no_cache);
        assert_eq!(storable(eval(206, &[])).fresh_for, 3600);
        assert_eq!(storable(eval(404, &[])).fresh_for, 60);
        assert_eq!(refused(eval(500, &[])), NotStorable::NoLifetime(500));
        assert_eq!(refused(eval(403, &[])), NotStorable::NoLifetime(403));
        assert_eq!(refused(eval(304, &[])), NotStorable::NoLifetime(304));
    }

    #[test]
    fn s_maxage_beats_max_age_beats_expires_beats_defaults() {
        let exp = date(NOW + 500);
        let d = date(NOW);
        let all = [
            ("cache-control", "max-age=100, s-maxage=200"),
            ("expires", exp.as_str()),
            ("date", d.as_str()),
        ];
        assert_eq!(storable(eval(200, &all)).fresh_for, 200);
        assert_eq!(storable(eval(200, &all[1..])).fresh_for, 500);
        let no_s = [("cache-control", "max-age=100"), all[1], all[2]];
        assert_eq!(storable(eval(200, &no_s)).fresh_for, 100);
        // Explicit freshness makes an otherwise uncached status storable.
        assert_eq!(
            storable(eval(500, &[("cache-control", "max-age=5")])).fresh_for,
            5
        );
    }

    #[test]
    fn expires_is_relative_to_the_origin_date_and_invalid_means_expired() {
        // The origin's clock is an hour behind ours: Expires - Date is what counts.
        let d = date(NOW - 3600);
        let exp = date(NOW - 3600 + 300);
        let s = storable(eval(
            200,
            &[
                ("date", d.as_str()),
                ("expires", exp.as_str()),
                ("age", "0"),
            ],
        ));
        // Apparent age (now - Date) is one hour: older than the 300 s lifetime.
        assert_eq!(s.fresh_for, 0);
        let exp = date(NOW + 300);
        assert_eq!(
            storable(eval(200, &[("expires", exp.as_str())])).fresh_for,
            300
        );
        assert_eq!(storable(eval(200, &[("expires", "0")])).fresh_for, 0);
        let past = date(NOW - 10);
        assert_eq!(
            storable(eval(200, &[("expires", past.as_str())])).fresh_for,
            0
        );
    }

    #[test]
    fn no_lifetime_from_the_origin_is_revalidated_not_served_stale() {
        let policy = CachePolicy::default();
        assert!(policy.stale_while_revalidate_secs > 0);
        for headers in [
            vec![("cache-control", "max-age=0")],
            vec![("expires", "0")],
            vec![
                ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
                ("expires", "Tue, 14 Nov 2023 22:13:20 GMT"),
            ],
        ] {
            let f = storable(evaluate(200, &h(&headers), &policy, false, false, NOW, 0));
            assert_eq!(
                (f.fresh_for, f.stale_while_revalidate),
                (0, 0),
                "{headers:?}"
            );
            assert_eq!(f.stale_if_error, policy.stale_if_error_secs, "{headers:?}");
        }
        // Its own stale-while-revalidate still counts; a lifetime that runs out gets the default.
        let f = storable(evaluate(
            200,
            &h(&[("cache-control", "max-age=0, stale-while-revalidate=30")]),
            &policy,
            false,
            false,
            NOW,
            0,
        ));
        assert_eq!(f.stale_while_revalidate, 30);
        let f = storable(evaluate(
            200,
            &h(&[("cache-control", "max-age=1")]),
            &policy,
            false,
            false,
            NOW,
            0,
        ));
        assert_eq!(f.stale_while_revalidate, policy.stale_while_revalidate_secs);
    }

    #[test]
    fn age_is_subtracted() {
        let s = storable(eval(
            200,
            &[("cache-control", "max-age=100"), ("age", "30")],
        ));
        assert_eq!((s.fresh_for, s.age), (70, 30));
        let s = storable(eval(
            200,
            &[("cache-control", "max-age=100"), ("age", "300")],
        ));
        assert_eq!((s.fresh_for, s.age), (0, 300));
        // now - Date larger than Age wins.
        let d = date(NOW - 50);
        let s = storable(eval(
            200,
            &[
                ("cache-control", "max-age=100"),
                ("age", "10"),
                ("date", d.as_str()),
            ],
        ));
        assert_eq!((s.fresh_for, s.age), (50, 50));
        // Defaults are aged too (an upstream cache answered).
        assert_eq!(storable(eval(200, &[("age", "600")])).fresh_for, 3000);
    }

    #[test]
    fn an_answer_stale_on_arrival_has_the_rest_of_its_stale_windows() {
        // 140 s stale on arrival: 60 s of stale-while-revalidate are over, 160 s of
        // stale-if-error are left of 300.
        let s = storable(eval(
            200,
            &[
                (
                    "cache-control",
                    "max-age=60, stale-while-revalidate=60, stale-if-error=300",
                ),
                ("age", "200"),
            ],
        ));
        assert_eq!(
            (s.fresh_for, s.stale_while_revalidate, s.stale_if_error),
            (0, 0, 160)
        );
        // 10 s stale: 50 s of its window left.
        let s = storable(eval(
            200,
            &[
                ("cache-control", "max-age=60, stale-while-revalidate=60"),
                ("age", "70"),
            ],
        ));
        assert_eq!((s.fresh_for, s.stale_while_revalidate), (0, 50));
    }

    #[test]
    fn not_storable_reasons() {
        assert_eq!(
            refused(eval(200, &[("cache-control", "no-store")])),
            NotStorable::NoStore
        );
        assert_eq!(
            refused(eval(
                200,
                &[
                    ("cache-control", "public, max-age=60"),
                    ("cache-control", "No-Store")
                ]
            )),
            NotStorable::NoStore,
            "directives from every Cache-Control header, case-insensitive"
        );
        assert_eq!(
            refused(eval(200, &[("cache-control", "private, max-age=60")])),
            NotStorable::Private
        );
        assert_eq!(
            refused(eval(200, &[("set-cookie", "a=b")])),
            NotStorable::SetCookie
        );
        assert_eq!(
            refused(eval(200, &[("vary", "Accept-Encoding, User-Agent")])),
            NotStorable::Vary("User-Agent".into())
        );
        assert_eq!(
            refused(eval(200, &[("vary", "*")])),
            NotStorable::Vary("*".into())
        );
        storable(eval(200, &[("vary", "accept-encoding")]));
        // `Origin` only when the route answers CORS itself.
        let origin = h(&[
            ("cache-control", "max-age=60"),
            ("vary", "Origin, Accept-Encoding"),
        ]);
        let p = CachePolicy::default();
        assert_eq!(
            refused(evaluate(200, &origin, &p, false, false, NOW, 0)),
            NotStorable::Vary("Origin".into())
        );
        storable(evaluate(200, &origin, &p, false, true, NOW, 0));
    }

    #[test]
    fn authorization_needs_explicit_permission() {
        let p = CachePolicy::default();
        let no = evaluate(
            200,
            &h(&[("cache-control", "max-age=60")]),
            &p,
            true,
            false,
            NOW,
            0,
        );
        assert_eq!(refused(no), NotStorable::Authorization);
        for cc in [
            "public, max-age=60",
            "s-maxage=60",
            "must-revalidate, max-age=60",
        ] {
            storable(evaluate(
                200,
                &h(&[("cache-control", cc)]),
                &p,
                true,
                false,
                NOW,
                0,
            ));
            assert!(shared_with_authorization(["max-age=1", cc]), "{cc}");
        }
        // No permission, or private/no-store besides it.
        for cc in [
            "",
            "max-age=60",
            "no-cache, max-age=60",
            // proxy-revalidate is not in §3.5's list (nor was it in RFC 7234 §3.2).
            "proxy-revalidate, max-age=60",
            "x-public",
            "community=\"public\"",
        ] {
            let hm = h(&[("cache-control", cc)]);
            assert_eq!(
                refused(evaluate(200, &hm, &p, true, false, NOW, 0)),
                NotStorable::Authorization,
                "{cc:?}"
            );
            assert!(!shared_with_authorization([cc]), "{cc:?}");
        }
        assert!(!shared_with_authorization([]));
        let hm = h(&[("cache-control", "public, private")]);
        assert_eq!(
            refused(evaluate(200, &hm, &p, true, false, NOW, 0)),
            NotStorable::Private
        );
        // Ignoring the origin's freshness headers does not ignore its permission to share.
        let ignore = CachePolicy {
            ignore_origin_headers: true,
            ..CachePolicy::default()
        };
        let hm = h(&[("cache-control", "max-age=60")]);
        assert_eq!(
            refused(evaluate(200, &hm, &ignore, true, false, NOW, 0)),
            NotStorable::Authorization
        );
        storable(evaluate(200, &hm, &ignore, false, false, NOW, 0));
        let hm = h(&[("cache-control", "public, max-age=5")]);
        assert_eq!(
            storable(evaluate(200, &hm, &ignore, true, false, NOW, 0)).fresh_for,
            3600
        );
    }

    #[test]
    fn no_cache_and_must_revalidate_disable_stale_serving() {
        let s = storable(eval(200, &[("cache-control", "no-cache, max-age=600")]));
        assert!(s.no_cache && s.must_revalidate);
        assert_eq!(
            (s.fresh_for, s.stale_while_revalidate, s.stale_if_error),
            (0, 0, 0)
        );
        let s = storable(eval(
            200,
            &[("cache-control", "max-age=600, must-revalidate")],
        ));
        assert!(s.must_revalidate && !s.no_cache);
        assert_eq!(
            (s.fresh_for, s.stale_while_revalidate, s.stale_if_error),
            (600, 0, 0)
        );
        // s-maxage is proxy-revalidate for a shared cache (RFC 9111 §5.2.2.10), whatever
        // stale windows the origin or the route would give.
        let s = storable(eval(
            200,
            &[(
                "cache-control",
                "s-maxage=600, stale-while-revalidate=60, stale-if-error=60",
            )],
        ));
        assert!(s.must_revalidate && !s.no_cache);
        assert_eq!(
            (s.fresh_for, s.stale_while_revalidate, s.stale_if_error),
            (600, 0, 0)
        );
        let s = storable(eval(200, &[("pragma", "no-cache")]));
        assert!(s.no_cache);
        let s = storable(eval(
            200,
            &[("pragma", "no-cache"), ("cache-control", "max-age=5")],
        ));
        assert!(
            !s.no_cache,
            "Pragma is ignored when Cache-Control is present"
        );
    }

    #[test]
    fn origin_stale_windows_override_the_policy() {
        let s = storable(eval(
            200,
            &[(
                "cache-control",
                "max-age=10, stale-while-revalidate=5, stale-if-error=\"7\"",
            )],
        ));
        assert_eq!((s.stale_while_revalidate, s.stale_if_error), (5, 7));
    }

    /// Bytes outside ASCII in a quoted string (UTF-8 or Latin-1) do not hide the line's other
    /// directives.
    #[test]
    fn a_line_with_non_ascii_bytes_still_counts() {
        let with = |line: &[u8]| {
            let mut m = HeaderMap::new();
            m.append(CACHE_CONTROL, http::HeaderValue::from_static("max-age=600"));
            m.append(
                CACHE_CONTROL,
                http::HeaderValue::from_bytes(line).expect("obs-text is a valid value"),
            );
            evaluate(200, &m, &CachePolicy::default(), false, false, NOW, 0)
        };
        assert_eq!(
            refused(with("private, x-note=\"café\"".as_bytes())),
            NotStorable::Private
        );
        assert_eq!(
            refused(with(b"no-store, x-note=\"caf\xe9\"")),
            NotStorable::NoStore
        );
        let s = storable(with("no-cache, x=\"é\"".as_bytes()));
        assert!(s.no_cache && s.fresh_for == 0, "{s:?}");
        // An Expires with such a byte is invalid: already past, not absent.
        let mut m = HeaderMap::new();
        m.append(
            EXPIRES,
            http::HeaderValue::from_bytes(b"Thu, 01 Jan 2099 00:00:00 GMT\xe9").expect("obs-text"),
        );
        let s = storable(evaluate(
            200,
            &m,
            &CachePolicy::default(),
            false,
            false,
            NOW,
            0,
        ));
        assert_eq!(s.fresh_for, 0);
    }

    #[test]
    fn malformed_and_huge_values() {
        assert_eq!(
            storable(eval(200, &[("cache-control", "max-age=abc")])).fresh_for,
            0
        );
        assert_eq!(
            storable(eval(200, &[("cache-control", "max-age=-5")])).fresh_for,
            0
        );
        assert_eq!(
            storable(eval(
                200,
                &[("cache-control", "max-age=99999999999999999999999")]
            ))
            .fresh_for,
            1 << 31
        );
        // An Age past 2^31 counts as 2^31 (RFC 9111 §1.2.2), so one that grows never wraps.
        let s = storable(eval(
            200,
            &[("cache-control", "max-age=60"), ("age", "4294967296")],
        ));
        assert_eq!((s.age, s.fresh_for), (1 << 31, 0));
        // Duplicate directives: the smaller (more conservative) one, every directive alike.
        assert_eq!(
            storable(eval(200, &[("cache-control", "max-age=50, max-age=10")])).fresh_for,
            10
        );
        let s = storable(eval(
            200,
            &[(
                "cache-control",
                "max-age=1, stale-while-revalidate=1, stale-while-revalidate=100, \
                 stale-if-error=9, stale-if-error=3",
            )],
        ));
        assert_eq!((s.stale_while_revalidate, s.stale_if_error), (1, 3));
        // Quoted commas do not split directives.
        let s = storable(eval(
            200,
            &[("cache-control", "community=\"a,b\", max-age=9")],
        ));
        assert_eq!(s.fresh_for, 9);
    }

    #[test]
    fn ignore_origin_headers_uses_the_policy_only() {
        let p = CachePolicy {
            valid: vec![ValidRule {
                status: vec![200],
                secs: 120,
            }],
            ignore_origin_headers: true,
            stale_while_revalidate_secs: 1,
            stale_if_error_secs: 2,
        };
        let hm = h(&[
            ("cache-control", "no-store, private, max-age=5"),
            ("age", "100"),
            ("expires", "0"),
        ]);
        let s = storable(evaluate(200, &hm, &p, false, false, NOW, 0));
        assert_eq!(
            (
                s.fresh_for,
                s.age,
                s.stale_while_revalidate,
                s.stale_if_error
            ),
            (120, 0, 1, 2)
        );
        assert_eq!(
            refused(evaluate(404, &hm, &p, false, false, NOW, 0)),
            NotStorable::NoLifetime(404)
        );
        // Set-Cookie and Vary still forbid storing.
        let hm = h(&[("set-cookie", "x=1")]);
        assert_eq!(
            refused(evaluate(200, &hm, &p, false, false, NOW, 0)),
            NotStorable::SetCookie
        );
        let hm = h(&[("vary", "Cookie")]);
        assert_eq!(
            refused(evaluate(200, &hm, &p, false, false, NOW, 0)),
            NotStorable::Vary("Cookie".into())
        );
    }
}
