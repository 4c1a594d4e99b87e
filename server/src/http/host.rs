//! Is a `Host` header value a valid authority (RFC 9112 §3.2, RFC 3986 §3.2.2)? `uri-host
//! [":" port]`, where uri-host is an IP literal in brackets, an IPv4 address or a reg-name of
//! unreserved, percent-encoded and sub-delim characters. An empty value is allowed (a target
//! without authority). A server must answer 400 to anything else.

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
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return false;
        };
        if !ip_literal(&rest[..end]) {
            return false;
        }
        match &rest[end + 1..] {
            "" => return true,
            after => match after.strip_prefix(':') {
                Some(p) => ("", p),
                None => return false,
            },
        }
    } else {
        match value.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (value, ""),
        }
    };
    port.bytes().all(|b| b.is_ascii_digit()) && reg_name(host.as_bytes())
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
            "",
            "under_score.example",
        ] {
            assert!(valid(h), "{h:?} should be valid");
        }
    }

    #[test]
    fn invalid_authorities() {
        for h in [
            "example.com:80:80",
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
