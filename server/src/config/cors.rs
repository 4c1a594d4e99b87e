//! Cross-origin resource sharing of a route (`routes[].http.cors`): which origins may read its
//! responses, with which methods and request headers, which response headers they may see, and
//! how long a preflight may be cached. Types and validation only; the per-request decision is
//! `http::cors`.

use super::errors::Errors;
use super::headers::is_token;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// CORS policy of a route. Present = CORS on (preflight `OPTIONS` answered with 204).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cors {
    /// `["*"]` (any origin) or a list of origins `scheme://host[:port]`; `https://*.example.com`
    /// matches every subdomain of example.com.
    pub allow_origins: Vec<String>,
    /// Methods allowed cross-origin (`Access-Control-Allow-Methods`).
    #[serde(default = "default_methods")]
    pub allow_methods: Vec<String>,
    /// Request headers allowed in cross-origin requests; `["*"]` allows any.
    #[serde(default = "default_allow_headers")]
    pub allow_headers: Vec<String>,
    /// Response headers scripts may read (`Access-Control-Expose-Headers`).
    #[serde(default = "default_expose_headers")]
    pub expose_headers: Vec<String>,
    /// How long a browser may cache a preflight answer (`Access-Control-Max-Age`); absent = not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_secs: Option<u64>,
    /// `Access-Control-Allow-Credentials: true` (cookies/HTTP auth); not with `*` origins.
    #[serde(default)]
    pub allow_credentials: bool,
}

fn default_methods() -> Vec<String> {
    vec!["GET".into(), "HEAD".into()]
}
fn default_allow_headers() -> Vec<String> {
    vec!["Range".into()]
}
/// What a player needs to see of a ranged response.
pub fn default_expose_headers() -> Vec<String> {
    ["Content-Length", "Content-Range", "Accept-Ranges", "ETag"]
        .map(String::from)
        .to_vec()
}

impl Cors {
    /// A policy for `origins` with every other field at its default.
    pub fn with_origins(origins: Vec<String>) -> Cors {
        Cors {
            allow_origins: origins,
            allow_methods: default_methods(),
            allow_headers: default_allow_headers(),
            expose_headers: default_expose_headers(),
            max_age_secs: None,
            allow_credentials: false,
        }
    }

    /// Any origin (`allow_origins = ["*"]`).
    pub fn any_origin(&self) -> bool {
        self.allow_origins.iter().any(|o| o == "*")
    }
}

/// `scheme://host[:port]` with an optional leading `*.` on the host.
fn valid_origin(o: &str) -> bool {
    let Some((scheme, rest)) = o.split_once("://") else {
        return false;
    };
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return false;
    }
    let (host, port) = if rest.starts_with('[') {
        match rest.find(']') {
            Some(i) => (&rest[..=i], rest[i + 1..].strip_prefix(':')),
            None => return false,
        }
    } else {
        match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if rest.starts_with('[') && !rest.ends_with(']') && port.is_none() {
        return false;
    }
    let host = host.strip_prefix("*.").unwrap_or(host);
    let host_ok = if host.starts_with('[') {
        host.len() > 2
            && host[1..host.len() - 1]
                .parse::<std::net::Ipv6Addr>()
                .is_ok()
    } else {
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    host_ok && port.is_none_or(|p| port_problem(scheme, p).is_none())
}

/// What keeps an origin's `:port` from ever matching the `Origin` a browser sends (RFC 6454
/// §6.2: the port in plain digits, and none at all when it is the scheme's default), if
/// anything.
fn port_problem(scheme: &str, port: &str) -> Option<String> {
    // The rule every port of the configuration follows (`listen::plain_port`), 0 excluded.
    match super::listen::plain_port(port) {
        Some(n) if n > 0 => {
            let default = match scheme.to_ascii_lowercase().as_str() {
                "http" => Some(80),
                "https" => Some(443),
                _ => None,
            };
            (default == Some(n)).then(|| {
                format!("browsers send the origin without the default port {n}: leave \":{n}\" out")
            })
        }
        _ => Some("the port must be 1-65535 in plain digits (no sign, no leading zero)".into()),
    }
}

/// The origin's `:port`, when it has one (after an IPv6 literal's `]`).
fn port_of(o: &str) -> Option<&str> {
    let rest = o.split_once("://")?.1;
    match rest.rfind(']') {
        Some(i) => rest[i + 1..].strip_prefix(':'),
        None => rest.split_once(':').map(|(_, p)| p),
    }
}

pub(super) fn check(e: &mut Errors, field: &str, c: &Cors) {
    if c.allow_origins.is_empty() {
        e.push(
            format!("{field}.allow_origins"),
            "list at least one origin, or \"*\"",
        );
    }
    for (i, o) in c.allow_origins.iter().enumerate() {
        if o == "*" {
            if c.allow_origins.len() > 1 {
                e.push(
                    format!("{field}.allow_origins[{i}]"),
                    "\"*\" must be the only entry",
                );
            }
            if c.allow_credentials {
                e.push(
                    format!("{field}.allow_credentials"),
                    "browsers refuse credentials with \"*\": list the origins",
                );
            }
        } else if !valid_origin(o) {
            // The port's own problem only when the rest is right (a trailing `/` after a port
            // is a path, not a bad port).
            let scheme = o.split_once("://").map_or("", |(s, _)| s);
            let why = port_of(o)
                .filter(|p| {
                    !p.contains(['/', '@', '?', '#'])
                        && !p.contains(char::is_whitespace)
                        && valid_origin(&o[..o.len() - p.len() - 1])
                })
                .and_then(|p| port_problem(scheme, p));
            e.push(
                format!("{field}.allow_origins[{i}]"),
                match why {
                    Some(why) => format!("{o:?}: {why}"),
                    None => format!("{o:?} must be scheme://host[:port] without a path (or \"*\")"),
                },
            );
        }
    }
    for (i, m) in c.allow_methods.iter().enumerate() {
        if m != "GET" && m != "HEAD" {
            e.push(
                format!("{field}.allow_methods[{i}]"),
                format!("{m:?}: only GET and HEAD are served"),
            );
        }
    }
    for (list, name) in [
        (&c.allow_headers, "allow_headers"),
        (&c.expose_headers, "expose_headers"),
    ] {
        for (i, h) in list.iter().enumerate() {
            if h == "*" && c.allow_credentials {
                e.push(
                    format!("{field}.{name}[{i}]"),
                    "\"*\" is taken literally by browsers when credentials are allowed",
                );
            } else if h != "*" && !is_token(h) {
                e.push(
                    format!("{field}.{name}[{i}]"),
                    format!("{h:?} is not a header name"),
                );
            }
        }
    }
    if c.max_age_secs.is_some_and(|s| s > 86_400) {
        e.push(
            format!("{field}.max_age_secs"),
            "must be at most 86400 (browsers cap it lower)",
        );
    }
}
