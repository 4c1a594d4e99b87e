//! What a listening address may say: an IP literal, or `*` for every address of both families
//! (one dual-stack IPv6 socket, or IPv4 alone on a kernel without IPv6: Go's `net.Listen(":80")`).
//! `*` is what a pod needs whatever its cluster's family (IPv4, IPv6-only or dual-stack), so the
//! operator renders it. Parsing and the overlap rule only: binding is `crate::bind`'s.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// A listener's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListenIp {
    /// `*`: every IPv6 and IPv4 address.
    Any,
    /// One address, or `0.0.0.0` / `::` for every address of that family only (an IPv6 socket
    /// is IPv6-only, so `0.0.0.0` and `::` may share a port).
    Ip(IpAddr),
}

/// Not an IP literal nor `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotListenIp;

impl FromStr for ListenIp {
    type Err = NotListenIp;

    fn from_str(s: &str) -> Result<ListenIp, NotListenIp> {
        match s {
            "*" => Ok(ListenIp::Any),
            _ => s.parse().map(ListenIp::Ip).map_err(|_| NotListenIp),
        }
    }
}

impl fmt::Display for ListenIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenIp::Any => f.write_str("*"),
            ListenIp::Ip(ip) => ip.fmt(f),
        }
    }
}

impl ListenIp {
    /// `ADDR:PORT` as written in `admin.listen` and messages: `*:80`, `10.0.0.1:80`,
    /// `[::1]:80`.
    pub fn with_port(self, port: u16) -> String {
        match self {
            ListenIp::Any => format!("*:{port}"),
            ListenIp::Ip(ip) => SocketAddr::new(ip, port).to_string(),
        }
    }

    /// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`): an IPv6 socket here is IPv6-only, so
    /// it can never be bound (EINVAL); the IPv4 address itself is meant.
    pub fn mapped_v4(self) -> Option<std::net::Ipv4Addr> {
        match self {
            ListenIp::Ip(IpAddr::V6(v6)) => v6.to_ipv4_mapped(),
            _ => None,
        }
    }

    /// What is wrong with an address [`Self::mapped_v4`] finds, and what to write instead
    /// (`instead`: the IPv4 address, with the port where the value had one).
    pub fn mapped_v4_error(instead: impl fmt::Display) -> String {
        format!("is an IPv4-mapped IPv6 address, which an IPv6 socket here (IPv6-only) cannot bind: write {instead}")
    }

    /// Whether sockets on one port at `self` and `other` cannot both be bound: the same
    /// address, one of them the unspecified address of the other's family, or either `*`.
    pub fn clashes(self, other: ListenIp) -> bool {
        match (self, other) {
            (ListenIp::Any, _) | (_, ListenIp::Any) => true,
            (ListenIp::Ip(x), ListenIp::Ip(y)) => {
                x.is_ipv4() == y.is_ipv4() && (x == y || x.is_unspecified() || y.is_unspecified())
            }
        }
    }
}

/// `ADDR:PORT`, `[V6]:PORT` or `*:PORT` (the admin listener's `listen`).
pub fn parse_socket(s: &str) -> Option<(ListenIp, u16)> {
    if let Some(port) = s.strip_prefix("*:") {
        return plain_port(port).map(|p| (ListenIp::Any, p));
    }
    let a: SocketAddr = s.parse().ok()?;
    // The port as every other port is written (SocketAddr takes `080` too).
    let (_, port) = s.rsplit_once(':')?;
    plain_port(port)?;
    Some((ListenIp::Ip(a.ip()), a.port()))
}

/// A port in plain digits (no sign, spaces or leading zeros), 0-65535.
pub fn plain_port(p: &str) -> Option<u16> {
    let plain =
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (p == "0" || !p.starts_with('0'));
    if !plain {
        return None;
    }
    p.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_star_and_literals() {
        assert_eq!("*".parse(), Ok(ListenIp::Any));
        assert_eq!("::1".parse(), Ok(ListenIp::Ip("::1".parse().expect("ip"))));
        assert_eq!("**".parse::<ListenIp>(), Err(NotListenIp));
        assert_eq!("localhost".parse::<ListenIp>(), Err(NotListenIp));
        assert_eq!(parse_socket("*:9190"), Some((ListenIp::Any, 9190)));
        assert_eq!(
            parse_socket("[::]:80"),
            Some((ListenIp::Ip("::".parse().expect("ip")), 80))
        );
        assert_eq!(parse_socket("*:+80"), None);
        assert_eq!(parse_socket("*"), None);
        assert_eq!(parse_socket("*:70000"), None);
        // Leading zeros are refused in every form, as for every other port.
        assert_eq!(parse_socket("127.0.0.1:025301"), None);
        assert_eq!(parse_socket("[::1]:080"), None);
        assert_eq!(parse_socket("*:080"), None);
        assert_eq!(
            parse_socket("127.0.0.1:0"),
            Some((ListenIp::Ip("127.0.0.1".parse().expect("ip")), 0))
        );
    }

    #[test]
    fn written_with_their_port() {
        let ip = |s: &str| ListenIp::Ip(s.parse().expect("ip"));
        assert_eq!(ListenIp::Any.with_port(80), "*:80");
        assert_eq!(ip("10.0.0.1").with_port(80), "10.0.0.1:80");
        assert_eq!(ip("::1").with_port(80), "[::1]:80");
        assert_eq!(
            ip("::ffff:10.0.0.1").mapped_v4(),
            Some([10, 0, 0, 1].into())
        );
        assert_eq!(ip("::1").mapped_v4(), None);
    }

    #[test]
    fn star_clashes_with_every_address() {
        let ip = |s: &str| ListenIp::Ip(s.parse().expect("ip"));
        assert!(ListenIp::Any.clashes(ip("::1")));
        assert!(ip("10.0.0.1").clashes(ListenIp::Any));
        assert!(ip("0.0.0.0").clashes(ip("10.0.0.1")));
        assert!(!ip("0.0.0.0").clashes(ip("::")));
        assert!(!ip("10.0.0.1").clashes(ip("10.0.0.2")));
    }
}
