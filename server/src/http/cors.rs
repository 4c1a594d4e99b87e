//! The CORS decision for one request on a route with a [`Cors`] policy (Fetch standard, "CORS
//! protocol"): the headers of an actual response, and the answer to a preflight (`OPTIONS` with
//! `Origin` and `Access-Control-Request-Method`). Pure: the caller adds the headers and decides
//! the status. A route without a policy gets no CORS headers at all.

use crate::config::Cors;

/// The request fields CORS looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct CorsRequest<'a> {
    pub origin: Option<&'a str>,
    /// `Access-Control-Request-Method` (preflights only).
    pub request_method: Option<&'a str>,
    /// `Access-Control-Request-Headers` (preflights only).
    pub request_headers: Option<&'a str>,
}

impl CorsRequest<'_> {
    /// `OPTIONS` with these fields is a preflight; any other `OPTIONS` is a plain one.
    pub fn is_preflight(&self) -> bool {
        self.origin.is_some() && self.request_method.is_some()
    }
}

/// Headers to add, plus the request fields the answer depended on (for `Vary`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorsHeaders {
    pub headers: Vec<(&'static str, String)>,
    pub vary: Vec<&'static str>,
}

fn scheme_host_port(o: &str) -> Option<(&str, &str)> {
    o.split_once("://")
}

/// Does the request's `Origin` match one configured entry (`scheme://host[:port]`, or
/// `scheme://*.domain[:port]` for any subdomain)? ASCII case-insensitive.
fn origin_matches(pattern: &str, origin: &str) -> bool {
    if pattern.eq_ignore_ascii_case(origin) {
        return true;
    }
    let (Some((ps, prest)), Some((os, orest))) =
        (scheme_host_port(pattern), scheme_host_port(origin))
    else {
        return false;
    };
    let Some(suffix) = prest.strip_prefix("*.") else {
        return false;
    };
    let orest = orest.to_ascii_lowercase();
    let suffix = suffix.to_ascii_lowercase();
    ps.eq_ignore_ascii_case(os)
        && orest.len() > suffix.len() + 1
        && orest.ends_with(&suffix)
        && orest.as_bytes()[orest.len() - suffix.len() - 1] == b'.'
        && !orest[..orest.len() - suffix.len() - 1].contains([':', '/'])
}

/// The allowed origin value to send back, or None (origin absent or not allowed).
fn allowed_origin(c: &Cors, origin: Option<&str>) -> Option<String> {
    if c.any_origin() {
        return Some("*".into());
    }
    let o = origin?;
    c.allow_origins
        .iter()
        .any(|p| origin_matches(p, o))
        .then(|| o.to_string())
}

fn join(list: &[String]) -> String {
    list.join(", ")
}

/// Headers of an actual (non-preflight) response: `Access-Control-Allow-Origin` (`*`, or the
/// request's origin when listed), credentials, `Access-Control-Expose-Headers`. With a list of
/// origins the answer depends on `Origin`, so `Vary: Origin` is asked for on every response.
pub fn actual(c: &Cors, req: &CorsRequest<'_>) -> CorsHeaders {
    let mut out = CorsHeaders::default();
    if allow(c, req, &mut out) && !c.expose_headers.is_empty() {
        out.headers
            .push(("Access-Control-Expose-Headers", join(&c.expose_headers)));
    }
    out
}

/// The part common to both answers: `Vary: Origin` for a list of origins, then the allowed
/// origin and credentials. False when the origin is not allowed (nothing else is sent).
fn allow(c: &Cors, req: &CorsRequest<'_>, out: &mut CorsHeaders) -> bool {
    if !c.any_origin() {
        out.vary.push("Origin");
    }
    let Some(origin) = allowed_origin(c, req.origin) else {
        return false;
    };
    out.headers.push(("Access-Control-Allow-Origin", origin));
    if c.allow_credentials {
        out.headers
            .push(("Access-Control-Allow-Credentials", "true".into()));
    }
    true
}

/// Headers of the 204 answering a preflight. An origin that is not allowed gets none (the
/// browser then refuses the request); an allowed one gets the allowed methods and headers (the
/// browser checks its method and headers against them) and `Access-Control-Max-Age`.
pub fn preflight(c: &Cors, req: &CorsRequest<'_>) -> CorsHeaders {
    let mut out = CorsHeaders::default();
    if !allow(c, req, &mut out) {
        return out;
    }
    out.headers
        .push(("Access-Control-Allow-Methods", join(&c.allow_methods)));
    let any_header = c.allow_headers.iter().any(|h| h == "*");
    let headers = if any_header {
        // Echo what was asked: identical to `*` without credentials, and works with them.
        out.vary.push("Access-Control-Request-Headers");
        req.request_headers.unwrap_or("").trim().to_string()
    } else {
        join(&c.allow_headers)
    };
    if !headers.is_empty() {
        out.headers.push(("Access-Control-Allow-Headers", headers));
    }
    if let Some(s) = c.max_age_secs {
        out.headers.push(("Access-Control-Max-Age", s.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::default_expose_headers;

    fn policy(origins: &[&str]) -> Cors {
        Cors {
            allow_origins: origins.iter().map(|s| s.to_string()).collect(),
            allow_methods: vec!["GET".into(), "HEAD".into()],
            allow_headers: vec!["Range".into()],
            expose_headers: default_expose_headers(),
            max_age_secs: Some(600),
            allow_credentials: false,
        }
    }

    fn get<'a>(h: &'a CorsHeaders, name: &str) -> Option<&'a str> {
        h.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    fn from(origin: &str) -> CorsRequest<'_> {
        CorsRequest {
            origin: Some(origin),
            ..Default::default()
        }
    }

    #[test]
    fn any_origin_needs_no_vary() {
        let c = policy(&["*"]);
        let h = actual(&c, &from("https://player.example"));
        assert_eq!(get(&h, "Access-Control-Allow-Origin"), Some("*"));
        assert_eq!(
            get(&h, "Access-Control-Expose-Headers"),
            Some("Content-Length, Content-Range, Accept-Ranges, ETag")
        );
        assert!(h.vary.is_empty());
        // Same answer without Origin: the response does not depend on it.
        assert_eq!(actual(&c, &CorsRequest::default()), h);
    }

    #[test]
    fn listed_origins_are_echoed_and_vary() {
        let c = policy(&["https://player.example", "https://*.cdn.example:8443"]);
        let h = actual(&c, &from("https://player.example"));
        assert_eq!(
            get(&h, "Access-Control-Allow-Origin"),
            Some("https://player.example")
        );
        assert_eq!(h.vary, vec!["Origin"]);
        let h = actual(&c, &from("https://a.b.cdn.example:8443"));
        assert_eq!(
            get(&h, "Access-Control-Allow-Origin"),
            Some("https://a.b.cdn.example:8443")
        );
        for bad in [
            "https://evil.example",
            "http://player.example",
            "https://cdn.example:8443",
            "https://xcdn.example:8443",
            "https://a.cdn.example",
            "https://player.example.evil",
        ] {
            let h = actual(&c, &from(bad));
            assert!(h.headers.is_empty(), "{bad}: {h:?}");
            assert_eq!(h.vary, vec!["Origin"], "{bad}");
        }
        let h = actual(&c, &CorsRequest::default());
        assert!(h.headers.is_empty());
        assert_eq!(h.vary, vec!["Origin"]);
    }

    #[test]
    fn credentials() {
        let mut c = policy(&["https://app.example"]);
        c.allow_credentials = true;
        let h = actual(&c, &from("https://app.example"));
        assert_eq!(get(&h, "Access-Control-Allow-Credentials"), Some("true"));
    }

    #[test]
    fn preflights() {
        let c = policy(&["https://player.example"]);
        let req = CorsRequest {
            origin: Some("https://player.example"),
            request_method: Some("GET"),
            request_headers: Some("range"),
        };
        assert!(req.is_preflight());
        let h = preflight(&c, &req);
        assert_eq!(
            get(&h, "Access-Control-Allow-Origin"),
            Some("https://player.example")
        );
        assert_eq!(get(&h, "Access-Control-Allow-Methods"), Some("GET, HEAD"));
        assert_eq!(get(&h, "Access-Control-Allow-Headers"), Some("Range"));
        assert_eq!(get(&h, "Access-Control-Max-Age"), Some("600"));
        assert_eq!(get(&h, "Access-Control-Expose-Headers"), None);
        let denied = preflight(
            &c,
            &CorsRequest {
                origin: Some("https://x.example"),
                ..req
            },
        );
        assert!(denied.headers.is_empty());
        assert_eq!(denied.vary, vec!["Origin"]);
        let mut any = policy(&["*"]);
        any.allow_headers = vec!["*".into()];
        any.max_age_secs = None;
        let h = preflight(
            &any,
            &CorsRequest {
                request_headers: Some(" x-a, range "),
                ..req
            },
        );
        assert_eq!(get(&h, "Access-Control-Allow-Headers"), Some("x-a, range"));
        assert_eq!(get(&h, "Access-Control-Max-Age"), None);
        assert_eq!(h.vary, vec!["Access-Control-Request-Headers"]);
        assert!(!CorsRequest {
            request_method: None,
            ..req
        }
        .is_preflight());
    }
}
