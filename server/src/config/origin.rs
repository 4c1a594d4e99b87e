//! `[[origins]]`: the upstream servers a caching node fetches misses from, and their checks.
//!
//! Owns the `Origin` type (servers tried in order, Host/SNI overrides, CA file, timeouts, the
//! connection cap) and the validation of `origins[i].…` fields. Pure: it parses URLs as text and
//! never resolves, connects or reads the CA file (the origin client does that at start-up).

use super::errors::{check_unique_name, Errors};
use super::Config;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::PathBuf;

/// One origin: a named group of servers holding the same content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// Unique name (a-z, 0-9, '-'); routes refer to it and it is the metrics label `origin`.
    pub name: String,
    /// `http://HOST[:PORT]` or `https://HOST[:PORT]` URLs, tried in order: the next on a connect
    /// error, or when one took a request and gave no answer head (timeout, closed)
    /// (refused, timeout, TLS handshake failure); a request once sent is never retried.
    pub servers: Vec<String>,
    /// Host header sent to the origin (S3-style buckets); default: the server URL's authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// TLS server name (SNI and certificate check) for https servers; default: `host` without
    /// its port, else the URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// PEM bundle of CA certificates trusted for https servers, in addition to the system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Time allowed for TCP connect plus the TLS handshake, per server.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Time allowed for the origin's whole response head once the request is sent, then
    /// between body chunks.
    #[serde(default = "default_read_timeout_ms")]
    pub read_timeout_ms: u64,
    /// Concurrent origin connections over all workers; more requests wait for a free one, up
    /// to `read_timeout_ms` (then 504, or the stale entry under stale-if-error).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Body bytes of a passed-through answer (not storable) read from the origin ahead of a
    /// slow client and held in memory, so that an answer this size or smaller frees its origin
    /// connection at the origin's pace (nginx `proxy_buffers`); a longer one is read at the
    /// client's pace past this. All answers of the origin together hold at most
    /// `max_connections` x this. At most 64 MiB; 0 = read only as fast as the client takes it.
    #[serde(default = "default_pass_buffer_bytes")]
    pub pass_buffer_bytes: u64,
}

fn default_connect_timeout_ms() -> u64 {
    2000
}
fn default_read_timeout_ms() -> u64 {
    10_000
}
fn default_max_connections() -> usize {
    256
}
fn default_pass_buffer_bytes() -> u64 {
    1 << 20
}
/// Largest `pass_buffer_bytes`.
pub const PASS_BUFFER_MAX: u64 = 64 << 20;

/// Name of the origin `serve --origin URL` creates.
pub const DEFAULT_ORIGIN: &str = "origin";

impl Origin {
    /// An origin with the default timeouts and connection cap.
    pub fn new(name: impl Into<String>, servers: Vec<String>) -> Origin {
        Origin {
            name: name.into(),
            servers,
            host: None,
            sni: None,
            ca_file: None,
            connect_timeout_ms: default_connect_timeout_ms(),
            read_timeout_ms: default_read_timeout_ms(),
            max_connections: default_max_connections(),
            pass_buffer_bytes: default_pass_buffer_bytes(),
        }
    }
}

/// A server URL split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    pub https: bool,
    /// Host as written (IPv6 literals without brackets).
    pub host: String,
    pub port: u16,
    /// `host:port` as written in the URL (the default Host header).
    pub authority: String,
}

/// Parse `http://HOST[:PORT]` / `https://HOST[:PORT]` (an optional trailing `/`, nothing else).
/// HOST is a DNS name, an IPv4 address or a bracketed IPv6 address (`[::1]`); PORT is 1-65535
/// in plain digits (no sign, no leading zero).
pub fn parse_server_url(s: &str) -> Result<ServerUrl, String> {
    // The scheme is case-insensitive (RFC 3986 §3.1): `HTTPS://` is `https://`.
    let scheme = |name: &str| {
        s.get(..name.len())
            .filter(|head| head.eq_ignore_ascii_case(name))
            .map(|_| &s[name.len()..])
    };
    let (https, rest) = if let Some(r) = scheme("https://") {
        (true, r)
    } else if let Some(r) = scheme("http://") {
        (false, r)
    } else {
        return Err(format!("{s:?} must start with http:// or https://"));
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() {
        return Err(format!("{s:?} has no host"));
    }
    if authority
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{s:?} contains a space or a control character (a host name has none)"
        ));
    }
    if authority.contains(['/', '?', '#', '@']) {
        return Err(format!(
            "{s:?} must be only scheme://host[:port] (no path, query or user)"
        ));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("{s:?} has an unclosed IPv6 literal"))?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{s:?}: [{h}] is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("{s:?}: garbage after the IPv6 literal"))?,
            ),
        };
        (h.to_string(), port)
    } else {
        let (h, p) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        if h.contains(':') || h.contains(['[', ']']) {
            return Err(format!(
                "{s:?}: an IPv6 address must be written in brackets, such as http://[::1]:8080"
            ));
        }
        if h.is_empty() {
            return Err(format!("{s:?} has no host"));
        }
        if !valid_server_name(h) {
            return Err(format!("{s:?}: {h:?} is not a DNS name or IP address"));
        }
        (h.to_string(), p)
    };
    let port = match port {
        None => {
            if https {
                443
            } else {
                80
            }
        }
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0') => n,
            _ => {
                return Err(format!(
                    "{s:?} has an invalid port {p:?}: write 1-65535 in plain digits, without a sign or leading zeros"
                ))
            }
        },
    };
    Ok(ServerUrl {
        https,
        host,
        port,
        authority: authority.to_string(),
    })
}

/// A name a TLS certificate can be checked against: a DNS name or an IP literal.
fn valid_server_name(s: &str) -> bool {
    rustls_pki_types::ServerName::try_from(s).is_ok()
}

/// Check `origins[i].…`; returns the set of origin names for the route checks.
pub(super) fn check_origins<'a>(e: &mut Errors, cfg: &'a Config) -> HashSet<&'a str> {
    let mut names = HashSet::new();
    for (i, o) in cfg.origins.iter().enumerate() {
        let f = format!("origins[{i}]");
        check_unique_name(e, &f, "origin", &o.name, &mut names);
        if o.servers.is_empty() {
            e.push(format!("{f}.servers"), "at least one server is required");
        }
        // Whether the origin has an https:// server is known only when every server parses
        // (an unparsable one is reported on its own, not as "no https server" too).
        let mut any_https = false;
        let mut all_parsed = true;
        for (j, s) in o.servers.iter().enumerate() {
            match parse_server_url(s) {
                Ok(u) => any_https |= u.https,
                Err(msg) => {
                    all_parsed = false;
                    e.push(format!("{f}.servers[{j}]"), msg)
                }
            }
        }
        let no_https = !any_https && all_parsed && !o.servers.is_empty();
        if let Some(h) = &o.host {
            if let Err(why) = check_host_override(h) {
                e.push(format!("{f}.host"), format!("{h:?} {why}"));
            } else if any_https && o.sni.is_none() && !valid_server_name(host_without_port(h)) {
                e.push(
                    format!("{f}.host"),
                    format!(
                        "{:?} is the TLS name of this origin's https servers (no sni is set) and is not a DNS name or IP address: set sni to the name their certificate holds",
                        host_without_port(h)
                    ),
                );
            }
        }
        if let Some(sni) = &o.sni {
            if !valid_server_name(sni) {
                e.push(
                    format!("{f}.sni"),
                    format!("{sni:?} is not a DNS name or IP address"),
                );
            } else if no_https {
                e.push(
                    format!("{f}.sni"),
                    "only applies to https:// servers, and this origin has none",
                );
            }
        }
        if let Some(ca) = &o.ca_file {
            if super::errors::has_nul(ca) {
                e.push(
                    format!("{f}.ca_file"),
                    format!("{ca:?} contains a NUL byte: no file system path can"),
                );
            } else if !ca.is_absolute() {
                e.push(
                    format!("{f}.ca_file"),
                    format!("{ca:?} must be an absolute path"),
                );
            } else if no_https {
                e.push(
                    format!("{f}.ca_file"),
                    "only applies to https:// servers, and this origin has none",
                );
            }
        }
        if o.connect_timeout_ms == 0 || o.connect_timeout_ms > 600_000 {
            e.push(
                format!("{f}.connect_timeout_ms"),
                "must be between 1 and 600000 (ten minutes)",
            );
        }
        if o.read_timeout_ms == 0 || o.read_timeout_ms > 3_600_000 {
            e.push(
                format!("{f}.read_timeout_ms"),
                "must be between 1 and 3600000 (one hour)",
            );
        }
        if o.max_connections == 0 || o.max_connections > 65_536 {
            e.push(
                format!("{f}.max_connections"),
                "must be between 1 and 65536",
            );
        }
        if o.pass_buffer_bytes > PASS_BUFFER_MAX {
            e.push(
                format!("{f}.pass_buffer_bytes"),
                format!("must be at most {PASS_BUFFER_MAX} (64 MiB)"),
            );
        }
    }
    names
}

/// `host:port` or `[v6]:port` -> host (an origin's `host` as the TLS name of its https
/// servers when no `sni` is set).
pub fn host_without_port(h: &str) -> &str {
    if let Some(v6) = h.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    match h.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => h,
    }
}

/// An origin's `host` (the Host header it is sent): `name[:port]` or `[IPv6][:port]`, a port
/// being 1-65535; an error says what is wrong.
fn check_host_override(h: &str) -> Result<(), &'static str> {
    const FORM: &str = "is not a valid Host header value (host[:port])";
    let (host, port) =
        if let Some(rest) = h.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or(FORM)?;
            inner.parse::<std::net::Ipv6Addr>().map_err(|_| FORM)?;
            match after {
                "" => return Ok(()),
                a => ("x", a.strip_prefix(':').ok_or(FORM)?),
            }
        } else {
            match h.split_once(':') {
                Some((_, p)) if p.contains(':') => return Err(
                    "is not a valid Host header value: an IPv6 address needs brackets, like [::1]",
                ),
                Some((name, p)) => (name, p),
                None => (h, "1"),
            }
        };
    let name_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !name_ok {
        return Err(FORM);
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        _ => Err("is not a valid Host header value: its port must be 1-65535"),
    }
}
