//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3): which of a route's configured codings a
//! request accepts, best first (client q-value, then the route's order), for precompressed
//! siblings; and whether a request accepts a stored answer's `Content-Encoding`. Nothing is
//! compressed on the fly; the caller tries the sibling files in this order.

use crate::config::Precompressed;

/// The q-value the request gives `coding` (`*` covers codings not named; `x-gzip` is gzip).
fn q_for(accept: &str, coding: &str) -> f32 {
    let mut star = None;
    for el in accept.split(',') {
        let mut parts = el.split(';');
        let name = parts.next().unwrap_or("").trim();
        if name.is_empty() {
            continue;
        }
        let mut q = 1.0f32;
        for p in parts {
            let p = p.trim();
            if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                q = v.trim().parse::<f32>().unwrap_or(0.0).clamp(0.0, 1.0);
            }
        }
        let named = name.eq_ignore_ascii_case(coding)
            || (coding == "gzip" && name.eq_ignore_ascii_case("x-gzip"));
        if named {
            return q;
        }
        if name == "*" {
            star = Some(q);
        }
    }
    star.unwrap_or(0.0)
}

/// Whether a request with `accept` (its Accept-Encoding) accepts a body of `content_encoding`
/// (a Content-Encoding value, codings in the order applied; empty for none): no
/// Accept-Encoding accepts any coding; `identity` is no coding. A body without a coding is
/// acceptable unless `identity;q=0`, or `*;q=0` without an `identity` entry, excludes it
/// (RFC 9110 §12.5.3).
pub fn accepts(accept: Option<&str>, content_encoding: &str) -> bool {
    let Some(accept) = accept else {
        return true;
    };
    let codings: Vec<&str> = content_encoding
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
        .collect();
    if codings.is_empty() {
        return identity_accepted(accept);
    }
    codings
        .iter()
        .all(|c| q_for(accept, &c.to_ascii_lowercase()) > 0.0)
}

/// Whether `accept` leaves the uncoded form acceptable: it is unless named with q=0 or, not
/// named, covered by `*;q=0`.
fn identity_accepted(accept: &str) -> bool {
    let named = |name: &str| {
        accept.split(',').any(|el| {
            el.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(name)
        })
    };
    if named("identity") || named("*") {
        return q_for(accept, "identity") > 0.0;
    }
    true
}

/// The configured codings the request accepts, best first; empty when none (or no header).
pub fn acceptable(accept: Option<&str>, order: &[Precompressed]) -> Vec<Precompressed> {
    let Some(accept) = accept else {
        return Vec::new();
    };
    let mut scored: Vec<(f32, usize, Precompressed)> = order
        .iter()
        .enumerate()
        .map(|(i, c)| (q_for(accept, c.token()), i, *c))
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, _, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Precompressed::*;

    #[test]
    fn an_uncoded_body_is_acceptable_unless_excluded() {
        for accept in [
            "gzip",
            "br, gzip;q=0.5",
            "",
            "identity",
            "*",
            "*;q=0, identity",
        ] {
            assert!(accepts(Some(accept), ""), "{accept:?}");
            assert!(accepts(Some(accept), "identity"), "{accept:?}");
        }
        for accept in ["br, identity;q=0", "*;q=0", "gzip, *;q=0", "IDENTITY;q=0"] {
            assert!(!accepts(Some(accept), ""), "{accept:?}");
        }
        assert!(accepts(None, ""));
        assert!(accepts(Some("br, identity;q=0"), "br"));
        assert!(!accepts(Some("gzip;q=0"), "gzip"));
    }

    const ALL: &[Precompressed] = &[Br, Zstd, Gzip];

    #[test]
    fn server_order_among_equal_preferences() {
        assert_eq!(
            acceptable(Some("gzip, deflate, br, zstd"), ALL),
            vec![Br, Zstd, Gzip]
        );
        assert_eq!(
            acceptable(Some("gzip, deflate, br"), &[Gzip, Br]),
            vec![Gzip, Br]
        );
        assert_eq!(acceptable(Some("gzip"), ALL), vec![Gzip]);
        assert_eq!(acceptable(Some("x-gzip"), ALL), vec![Gzip]);
    }

    #[test]
    fn accepts_a_stored_coding() {
        assert!(accepts(None, "gzip"));
        assert!(accepts(Some("gzip, br"), "gzip"));
        assert!(accepts(Some("GZIP"), "Gzip"));
        assert!(accepts(Some("*"), "br"));
        assert!(accepts(Some("identity"), "identity"));
        assert!(!accepts(Some("identity"), "gzip"));
        assert!(!accepts(Some(""), "gzip"));
        assert!(!accepts(Some("gzip;q=0, br"), "gzip"));
        assert!(!accepts(Some("gzip"), "gzip, br"));
        assert!(accepts(Some("gzip, br"), "gzip, br"));
    }

    #[test]
    fn q_values_and_wildcards() {
        assert_eq!(acceptable(Some("br;q=0.5, gzip"), ALL), vec![Gzip, Br]);
        assert_eq!(acceptable(Some("br;q=0, *"), ALL), vec![Zstd, Gzip]);
        assert_eq!(
            acceptable(Some("*;q=0.1, gzip;q=0.9"), ALL),
            vec![Gzip, Br, Zstd]
        );
        assert_eq!(acceptable(Some("identity"), ALL), vec![]);
        assert_eq!(acceptable(Some("gzip;q=0"), ALL), vec![]);
        assert_eq!(acceptable(Some(""), ALL), vec![]);
        assert_eq!(acceptable(None, ALL), vec![]);
        assert_eq!(acceptable(Some("BR ; Q=1"), ALL), vec![Br]);
        assert_eq!(acceptable(Some("br"), &[]), vec![]);
    }
}
