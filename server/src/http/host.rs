//! Is a `Host` header value a valid authority (RFC 9112 §3.2, RFC 3986 §3.2.2)? `uri-host
//! [":" port]`, where uri-host is an IP literal in brackets, an IPv4 address or a reg-name of
//! unreserved, percent-encoded and sub-delim characters. The host may not be empty (RFC 9110
//! §4.2.1: an "http" URI with an empty host is invalid, and its recipient must reject it; the
//! empty Host of RFC 9112 §3.2 is for targets without an authority, which an origin server of
//! http URIs never has; nginx answers 400 too). A server must answer 400 to anything else.

fn is_unreserved_or_sub_delim(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)
}

fn reg_name(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                if !(s.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
                {
                    return false;
                }
                i += 3;
            }
            b if is_unreserved_or_sub_delim(b) => i += 1,
            _ => return false,
        }
    }
    true
}

fn ip_literal(inner: &str) -> bool {
    if let Some(future) = inner.strip_prefix(['v', 'V']) {
        // IPvFuture = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
        return match future.split_once('.') {
            Some((ver, rest)) => {
                !ver.is_empty()
                    && ver.bytes().all(|b| b.is_ascii_hexdigit())
                    && !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|b| is_unreserved_or_sub_delim(b) || b == b':')
            }
            None => false,
        };
    }
    inner.parse::<std::net::Ipv6Addr>().is_ok()
}

/// True when `value` (already trimmed of surrounding whitespace) may be a Host header.
pub fn valid(value: &str) -> bool {
    let port_ok = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = value.strip_prefix('[') {
        let Some((literal, after)) = rest.split_once(']') else {
            return false;
        };
        return ip_literal(literal)
            && (after.is_empty() || after.strip_prefix(':').is_some_and(port_ok));
    }
    let (host, port) = value.rsplit_once(':').unwrap_or((value, ""));
    !host.is_empty() && port_ok(port) && reg_name(host.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::valid;

    #[test]
    fn valid_authorities() {
        for h in [
            "example.com",
            "example.com:8080",
            "example.com:",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8080",
            "[v1.fe80::a+en1]",
            "xn--bcher-kva.example",
            "a%2Db.example",
            "under_score.example",
        ] {
            assert!(valid(h), "{h:?} should be valid");
        }
    }

    #[test]
    fn invalid_authorities() {
        for h in [
            "example.com:80:80",
            "",
            ":80",
            "exa mple.com",
            "example.com/path",
            "user@example.com",
            "[::1",
            "[::1]x",
            "[nothex]",
            "::1",
            "example.com:8o",
            "a%2",
            "a%zz",
            "bad\"quote",
            "a\\b",
        ] {
            assert!(!valid(h), "{h:?} should be invalid");
        }
    }
}
