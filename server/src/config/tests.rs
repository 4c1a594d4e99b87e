//! Unit tests of the config contract: defaults, TOML round trip, and validation messages.

use super::*;

fn parse(text: &str) -> Config {
    let mut c = Config::from_toml(text).expect("parses");
    c.normalize();
    c
}

fn fields(c: &Config) -> Vec<String> {
    c.field_errors().into_iter().map(|e| e.field).collect()
}

#[test]
fn minimal_file_gets_nginx_defaults_and_implicit_root_route() {
    let c = parse("[[volumes]]\nname = \"disk1\"\npath = \"/srv/disk1\"\n");
    assert_eq!(c.volumes[0].pool.threads, 32);
    assert_eq!(c.volumes[0].pool.max_queue, 65536);
    assert_eq!(c.volumes[0].offload, Offload::Auto);
    assert_eq!(c.limits.sendfile_max_chunk, 2 * 1024 * 1024);
    assert_eq!(c.listeners[0].port, 8080);
    assert_eq!(c.routes.len(), 1);
    assert_eq!(c.routes[0].prefix, "/");
    assert_eq!(c.routes[0].volume.as_deref(), Some("disk1"));
    c.validate().expect("valid");
}

#[test]
fn rendered_toml_round_trips() {
    let mut c = Config::for_root("/srv/www");
    c.normalize();
    let text = c.to_toml().expect("renders");
    assert_eq!(parse(&text), c);
}

#[test]
fn unknown_fields_are_rejected_with_their_name() {
    let err = Config::from_toml("[[volumes]]\nname = \"a\"\npath = \"/a\"\nthreds = 4\n")
        .expect_err("typo must fail");
    assert!(err.to_string().contains("threds"), "{err}");
}

#[test]
fn three_disk_split_is_valid() {
    let c = parse(
        r#"
[[volumes]]
name = "disk1"
path = "/data1"
[[volumes]]
name = "disk2"
path = "/data2"
[[volumes]]
name = "disk3"
path = "/data3"
[[routes]]
prefix = "/"
split = [{ volume = "disk1", percent = 33.3 }, { volume = "disk2", percent = 33.3 }, { volume = "disk3" }]
"#,
    );
    c.validate().expect("valid");
}

#[test]
fn every_violation_names_its_field() {
    let c = parse(
        r#"
workers = 5000
[[listeners]]
address = "localhost"
backlog = 0
defer_accept_secs = 100000
notsent_lowat_bytes = 100
congestion_control = "BBR!"
[limits]
sendfile_max_chunk = 10
[admin]
listen = "nope"
[[volumes]]
name = "Disk_1"
path = "relative"
pool = { threads = 0 }
[[volumes]]
name = "disk2"
path = "/d2"
[[volumes]]
name = "disk2"
path = "/d3"
[[routes]]
prefix = "media"
volume = "missing"
[[routes]]
prefix = "/x/"
split = [{ volume = "disk2" }, { volume = "disk2", percent = 120.0 }]
[[routes]]
prefix = "/y/"
split = [{ volume = "disk2", percent = 60.0 }, { volume = "disk2", percent = 50.0 }]
"#,
    );
    let f = fields(&c);
    for want in [
        "workers",
        "listeners[0].address",
        "listeners[0].backlog",
        "listeners[0].defer_accept_secs",
        "listeners[0].notsent_lowat_bytes",
        "listeners[0].congestion_control",
        "limits.sendfile_max_chunk",
        "admin.listen",
        "volumes[0].name",
        "volumes[0].path",
        "volumes[0].pool.threads",
        "volumes[2].name",
        "routes[0].prefix",
        "routes[0].volume",
        "routes[1].split[0].percent",
        "routes[1].split[1].percent",
        "routes[2].split",
    ] {
        assert!(f.iter().any(|x| x == want), "no error for {want}: {f:?}");
    }
    let msg = c.validate().expect_err("invalid").to_string();
    assert!(msg.contains("no volume is named \"missing\""), "{msg}");
}

#[test]
fn several_volumes_need_routes() {
    let c = parse(
        "[[volumes]]\nname = \"a\"\npath = \"/a\"\n[[volumes]]\nname = \"b\"\npath = \"/b\"\n",
    );
    assert_eq!(fields(&c), vec!["routes".to_string()]);
}

#[test]
fn open_file_cache_defaults_and_bounds() {
    let c = parse("[[volumes]]\nname = \"a\"\npath = \"/a\"\n");
    assert_eq!(c.open_file_cache.max_entries, 2048);
    assert_eq!(c.open_file_cache.valid_ms, 1000);
    let c = parse(
        "[open_file_cache]\nmax_entries = 2000000\nvalid_ms = 100000000\n\
         [[volumes]]\nname = \"a\"\npath = \"/a\"\n",
    );
    assert_eq!(
        fields(&c),
        vec![
            "open_file_cache.max_entries".to_string(),
            "open_file_cache.valid_ms".to_string()
        ]
    );
    let c = parse("[open_file_cache]\nmax_entries = 0\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n");
    c.validate().expect("0 disables the cache");
}

const HLS_LIBRARY: &str = include_str!("../../tests/data/hls-library.toml");

#[test]
fn http_options_parse_validate_and_round_trip() {
    let c = parse(HLS_LIBRARY);
    c.validate().expect("valid");
    assert_eq!(c.http.max_ranges, 8);
    assert!(c.http.etag_inode);
    let r = &c.routes[0].http;
    assert_eq!(
        r.precompressed,
        vec![Precompressed::Br, Precompressed::Zstd, Precompressed::Gzip]
    );
    let cors = r.cors.as_ref().expect("cors");
    assert_eq!(cors.allow_methods, vec!["GET", "HEAD"]);
    assert_eq!(cors.allow_headers, vec!["Range"]);
    assert_eq!(
        cors.expose_headers,
        vec!["Content-Length", "Content-Range", "Accept-Ranges", "ETag"]
    );
    let text = c.to_toml().expect("renders");
    assert_eq!(parse(&text), c, "{text}");
    // Defaults stay out of the rendered file.
    let plain = Config::for_root("/srv");
    let text = plain.to_toml().expect("renders");
    assert!(
        !text.contains("media_headers") && !text.contains("[routes.http"),
        "{text}"
    );
}

#[test]
fn http_defaults() {
    let c = parse("[[volumes]]\nname = \"a\"\npath = \"/a\"\n");
    assert_eq!(c.http.max_ranges, 16);
    assert!(c.http.etag_inode);
    assert_eq!(c.http.listing_max_entries, 1000);
    assert!(c.routes[0].http.is_default());
}

#[test]
fn http_unknown_fields_are_rejected() {
    for bad in [
        "[http]\nmax_range = 1\n",
        "[http.media_headers.m4s]\ncache = \"x\"\n",
        "[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n[routes.http]\nlistings = true\n",
        "[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n[routes.http.cors]\nallow_origins = [\"*\"]\norigins = 1\n",
        "[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n[routes.http]\nprecompressed = [\"deflate\"]\n",
    ] {
        let text = format!("[[volumes]]\nname = \"a\"\npath = \"/a\"\n{bad}");
        assert!(Config::from_toml(&text).is_err(), "accepted: {bad}");
    }
}

#[test]
fn http_violations_name_their_field() {
    let c = parse(include_str!("../../tests/data/http-violations.toml"));
    let f = fields(&c);
    for want in [
        "http.max_ranges",
        "http.listing_max_entries",
        "http.media_types.\"m.4s\"",
        "http.media_types.vtt",
        "http.media_headers.\"video/\"",
        "http.media_headers.ts.cache_control",
        "http.media_headers.ts.add.Content-Length",
        "http.media_headers.ts.add.Bad Name",
        "http.media_headers.ts.add.X-Ok",
        "http.media_headers.ts.add.Access-Control-Allow-Origin",
        "routes[0].http.precompressed[1]",
        "routes[0].http.headers.expires_secs",
        "routes[0].http.headers.add.x-cache",
        "routes[0].http.cors.allow_origins[0]",
        "routes[0].http.cors.allow_origins[1]",
        "routes[0].http.cors.allow_credentials",
        "routes[0].http.cors.allow_methods[0]",
        "routes[0].http.cors.allow_headers[0]",
        "routes[0].http.cors.max_age_secs",
    ] {
        assert!(f.iter().any(|x| x == want), "no error for {want}: {f:?}");
    }
    let ok = parse(
        "[[volumes]]\nname = \"a\"\npath = \"/a\"\n[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n\
         [routes.http.cors]\nallow_origins = [\"http://[::1]:8080\", \"https://a.example:8443\", \"https://*.b.example\"]\n",
    );
    assert_eq!(fields(&ok), Vec::<String>::new());
    // Ports a browser's Origin never carries: the scheme's default, signs, leading zeros.
    for (origin, why) in [
        (
            "https://b.example:443",
            "without the default port 443: leave \":443\" out",
        ),
        ("http://[::1]:80", "without the default port 80"),
        (
            "https://a.example:+443",
            "plain digits (no sign, no leading zero)",
        ),
        ("https://c.example:0443", "plain digits"),
        ("https://b.example:0", "1-65535"),
        ("https://b.example:", "1-65535"),
        // A path after a good port is the mistake, not the port.
        (
            "https://a.example:8443/",
            "must be scheme://host[:port] without a path",
        ),
        (
            "http://[::1]:8080/x",
            "must be scheme://host[:port] without a path",
        ),
        (
            "https://bad_host:443",
            "must be scheme://host[:port] without a path",
        ),
    ] {
        let c = parse(&format!(
            "[[volumes]]\nname = \"a\"\npath = \"/a\"\n[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n\
             [routes.http.cors]\nallow_origins = [\"{origin}\"]\n"
        ));
        let errs = c.field_errors();
        let e = errs
            .iter()
            .find(|e| e.field == "routes[0].http.cors.allow_origins[0]")
            .unwrap_or_else(|| panic!("{origin} accepted"));
        assert!(e.message.contains(why), "{origin}: {}", e.message);
    }
}

const CACHE_NODE: &str = include_str!("../../tests/data/cache-node.toml");

#[test]
fn cache_node_config_parses_with_its_defaults() {
    // The split lists the rest-taker first in CACHE_NODE only to test messages below; fix it.
    let c = parse(&CACHE_NODE.replace(
        r#"split = [{ volume = "disk1" }, { volume = "disk2", percent = 50.0 }]"#,
        r#"split = [{ volume = "disk1", percent = 50.0 }, { volume = "disk2" }]"#,
    ));
    c.validate().expect("valid");
    let o = &c.origins[0];
    assert_eq!(o.servers.len(), 2);
    assert_eq!(o.host.as_deref(), Some("bucket.example"));
    assert_eq!(
        c.volumes[0].cache.as_ref().unwrap().max_size,
        Some(ByteSize(10 << 30))
    );
    let d2 = c.volumes[1].cache.as_ref().unwrap();
    assert_eq!(d2, &VolumeCache::default());
    assert_eq!(
        (d2.max_size, d2.inactive_secs, d2.min_uses, d2.slice_size),
        (None, 600, 1, 1 << 20)
    );
    assert!(c.volumes[2].cache.is_none());
    assert_eq!(c.routes[0].origin.as_deref(), Some("origin"));
    assert_eq!(
        c.routes[0].cache.as_ref().unwrap().valid_for(206),
        Some(3600)
    );
    assert_eq!(c.routes[1].cache, None, "static routes get no policy");
    assert_eq!(c.admin.purge_token_file, "/etc/content/purge-token");
}

#[test]
fn cache_config_round_trips_with_max_size_in_bytes() {
    let c = parse(&CACHE_NODE.replace(
        r#"split = [{ volume = "disk1" }, { volume = "disk2", percent = 50.0 }]"#,
        r#"split = [{ volume = "disk1", percent = 50.0 }, { volume = "disk2" }]"#,
    ));
    let text = c.to_toml().expect("renders");
    assert!(text.contains("max_size = 10737418240"), "{text}");
    assert_eq!(parse(&text), c);
    // A cache route without [routes.cache] is rendered with the default policy.
    let c = parse(
        "[[origins]]\nname = \"o\"\nservers = [\"http://127.0.0.1:1\"]\n\
         [[volumes]]\nname = \"c\"\npath = \"/c\"\n[volumes.cache]\n",
    );
    c.validate().expect("valid");
    assert_eq!(
        c.routes[0].origin.as_deref(),
        Some("o"),
        "implicit / route of one cache volume"
    );
    assert_eq!(c.routes[0].cache, Some(CachePolicy::default()));
    let text = c.to_toml().unwrap();
    assert!(text.contains("[routes.cache]"), "{text}");
    assert_eq!(parse(&text), c);
}

#[test]
fn byte_sizes() {
    for (s, n) in [
        ("1024", 1024u64),
        ("4K", 4096),
        ("512M", 512 << 20),
        ("10G", 10 << 30),
        ("2T", 2 << 40),
        ("3 GiB", 3 << 30),
        ("7MB", 7 << 20),
        ("10Gi", 10 << 30),
        ("10 gi", 10 << 30),
        ("1Ti", 1 << 40),
        ("8 B", 8),
    ] {
        assert_eq!(ByteSize::parse(s), Ok(ByteSize(n)), "{s}");
    }
    for bad in [
        "",
        "G",
        "10X",
        "-5",
        "1.5G",
        "99999999999T",
        "10 Gx",
        "10iB",
        "10GiBs",
    ] {
        assert!(ByteSize::parse(bad).is_err(), "{bad}");
    }
    let c = parse("[[volumes]]\nname = \"c\"\npath = \"/c\"\n[volumes.cache]\nmax_size = 65536\n");
    assert_eq!(
        c.volumes[0].cache.as_ref().unwrap().max_size,
        Some(ByteSize(65536))
    );
    let err = Config::from_toml(
        "[[volumes]]\nname = \"c\"\npath = \"/c\"\n[volumes.cache]\nmax_size = \"10Q\"\n",
    )
    .expect_err("bad unit");
    assert!(err.to_string().contains("unknown size unit"), "{err}");
}

#[test]
fn unknown_cache_and_origin_fields_are_rejected() {
    for text in [
        "[[origins]]\nname = \"o\"\nservers = []\nretries = 3\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n",
        "[[volumes]]\nname = \"a\"\npath = \"/a\"\n[volumes.cache]\nmax_sise = 1\n",
        "[[volumes]]\nname = \"a\"\npath = \"/a\"\n[[routes]]\nprefix = \"/\"\nvolume = \"a\"\n[routes.cache]\nvalidity = 1\n",
    ] {
        let err = Config::from_toml(text).expect_err("unknown field");
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}

#[test]
fn every_cache_violation_names_its_field() {
    let c = parse(include_str!("../../tests/data/cache-violations.toml"));
    let errors = c.field_errors();
    let msg = |field: &str| -> String {
        errors
            .iter()
            .filter(|e| e.field == field)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    };
    for (field, want) in [
        ("origins[0].servers[1]", "origins[0].servers[1]: \"ftp://x\" must start with http:// or https://"),
        ("origins[0].servers[2]", "no path"),
        ("origins[0].servers[3]", "invalid port"),
        ("origins[0].ca_file", "absolute path"),
        ("origins[0].connect_timeout_ms", "between 1 and"),
        ("origins[0].read_timeout_ms", "between 1 and"),
        ("origins[0].max_connections", "between 1 and 65536"),
        ("origins[0].pass_buffer_bytes", "at most 67108864 (64 MiB)"),
        ("origins[1].name", "origin \"origin\" is defined twice"),
        ("origins[1].servers", "at least one server"),
        ("origins[2].sni", "only applies to https://"),
        ("origins[2].ca_file", "only applies to https://"),
        ("origins[2].host", "not a valid Host header"),
        ("volumes[0].cache.slice_size", "must be 0 (whole objects) or between 4096"),
        ("volumes[0].cache.max_size", "less than one slice"),
        ("volumes[0].cache.inactive_secs", "must be between 1 and 315360000"),
        ("volumes[0].cache.min_uses", "between 1 and 15"),
        ("routes[0].origin", "routes[0].origin: no origin named \"x\""),
        ("routes[0].split[1].volume", "routes[0].split[1].volume: \"disk2\" has no [volumes.cache]; a cache route needs cache volumes"),
        ("routes[0].cache.valid[0].status", "99 is not an HTTP status"),
        ("routes[0].cache.valid[1].status", "200 is already in an earlier rule"),
        ("routes[0].cache.valid[2].status", "at least one status"),
        ("routes[0].cache.valid[3].status", "502 is never stored: a 5xx passes through"),
        ("routes[0].cache.valid[3].status", "304 is never stored"),
        ("routes[1].volume", "\"disk1\" is a cache volume"),
        ("routes[0].http.precompressed", "precompressed is for static routes"),
        ("routes[0].http.listing", "listing is for static routes"),
        ("routes[2].cache", "needs `origin`"),
    ] {
        let got = msg(field);
        assert!(got.contains(want), "{field}: want {want:?}, got {got:?}\nall: {errors:?}");
    }
    assert!(
        msg("origins[0].servers[0]").is_empty(),
        "a good URL is not an error"
    );
}

#[test]
fn server_urls() {
    let u = parse_server_url("https://[::1]:8443/").unwrap();
    assert_eq!(
        (u.https, u.host.as_str(), u.port, u.authority.as_str()),
        (true, "::1", 8443, "[::1]:8443")
    );
    let u = parse_server_url("http://origin.example").unwrap();
    assert_eq!(
        (u.https, u.host.as_str(), u.port),
        (false, "origin.example", 80)
    );
    assert_eq!(parse_server_url("https://o").unwrap().port, 443);
    for bad in [
        "http://",
        "http://:80",
        "http://a?b",
        "http://u@a",
        "http://a:0",
        "http://[::1",
        "origin:80",
        "http://::1",
        "http://fe80::1",
        "http://fe80::1:8080",
        "http://127.0.0.1:+21050",
        "http://127.0.0.1:021050",
        "http://127.0.0.1:08080",
        "http://127.0.0.1:-1",
        "http://127.0.0.1:65536",
        "http://127.0.0.1:",
        "http://[zzz]:80",
        "http://[]:80",
        "http://[::1]x",
        "http://a]:80",
        "http://exa*mple",
    ] {
        assert!(parse_server_url(bad).is_err(), "{bad}");
    }
    let u = parse_server_url("http://[fe80::1]").unwrap();
    assert_eq!((u.host.as_str(), u.port), ("fe80::1", 80));
    let u = parse_server_url("http://127.0.0.1:65535").unwrap();
    assert_eq!((u.port, u.authority.as_str()), (65535, "127.0.0.1:65535"));
    let msg = parse_server_url("http://fe80::1").unwrap_err();
    assert!(msg.contains("must be written in brackets"), "{msg}");
    let msg = parse_server_url("http://exa mple").unwrap_err();
    assert!(msg.contains("contains a space"), "{msg}");
    let msg = parse_server_url("http://127.0.0.1:+21050").unwrap_err();
    assert!(msg.contains("plain digits"), "{msg}");
    // The scheme is case-insensitive (RFC 3986 §3.1); the host keeps its spelling.
    let u = parse_server_url("HTTPS://Origin.Example:8443").unwrap();
    assert_eq!(
        (u.https, u.host.as_str(), u.port),
        (true, "Origin.Example", 8443)
    );
    assert!(!parse_server_url("Http://o").unwrap().https);
    assert!(parse_server_url("httpx://o").is_err());
}

#[test]
fn for_cache_builds_the_contract_config() {
    let dirs: Vec<std::path::PathBuf> = ["/c1", "/c2", "/c3"].iter().map(Into::into).collect();
    let mut c = Config::for_cache("http://127.0.0.1:8081", &dirs);
    c.normalize();
    c.validate().expect("valid");
    assert_eq!(c.origins.len(), 1);
    assert_eq!(c.origins[0].name, "origin");
    assert_eq!(
        c.origins[0].servers,
        vec!["http://127.0.0.1:8081".to_string()]
    );
    let names: Vec<_> = c.volumes.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["cache1", "cache2", "cache3"]);
    assert!(c
        .volumes
        .iter()
        .all(|v| v.cache == Some(VolumeCache::default())));
    assert_eq!(c.routes.len(), 1);
    let r = &c.routes[0];
    assert_eq!(
        (r.prefix.as_str(), r.origin.as_deref()),
        ("/", Some("origin"))
    );
    let split: Vec<_> = r
        .split
        .iter()
        .map(|t| (t.volume.as_str(), t.percent))
        .collect();
    assert_eq!(
        split,
        [
            ("cache1", Some(100.0 / 3.0)),
            ("cache2", Some(100.0 / 3.0)),
            ("cache3", None)
        ]
    );
    assert_eq!(parse(&c.to_toml().unwrap()), c);
}

#[test]
fn min_uses_over_what_the_sketch_counts_is_refused() {
    for (n, ok) in [(15, true), (16, false), (1000, false)] {
        let c = parse(&format!(
            "[[volumes]]\nname = \"a\"\npath = \"/a\"\n[volumes.cache]\nmin_uses = {n}\n"
        ));
        let errors = c.field_errors();
        let refused = errors
            .iter()
            .any(|e| e.field == "volumes[0].cache.min_uses");
        assert_eq!(refused, !ok, "min_uses = {n}: {errors:?}");
    }
}

#[test]
fn an_admin_port_that_is_a_listeners_is_refused() {
    let base = "[[listeners]]\naddress = \"0.0.0.0\"\nport = 8080\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n";
    for (admin, refused) in [
        ("127.0.0.1:8080", true),
        ("0.0.0.0:8080", true),
        ("127.0.0.1:9190", false),
        ("127.0.0.1:0", false),
    ] {
        let c = parse(&format!("{base}[admin]\nlisten = \"{admin}\"\n"));
        let errors = c.field_errors();
        let hit = errors
            .iter()
            .any(|e| e.field == "admin.listen" && e.to_string().contains("listeners[0]"));
        assert_eq!(hit, refused, "{admin}: {errors:?}");
    }
}

#[test]
fn a_type_error_names_the_field_and_the_line() {
    let text = "[limits]\nmax_connections = \"many\"\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n";
    let e = Config::from_toml(text)
        .expect_err("a string for a number")
        .to_string();
    assert!(
        e.contains("field limits.max_connections") && e.contains("line 2"),
        "{e}"
    );
    let e = Config::from_toml(
        "[[volumes]]\nname = \"a\"\npath = \"/a\"\n[volumes.pool]\nthreads = \"8\"\n",
    )
    .expect_err("a string for a number")
    .to_string();
    assert!(e.contains("field volumes[0].pool.threads"), "{e}");
}

/// A TOML error's excerpt of a huge line is cut, and a file that is not UTF-8 is named with
/// where its first bad byte is.
#[test]
fn errors_show_a_huge_line_by_its_start_and_place_a_bad_byte() {
    let text = format!("x = \"{}\n", "a".repeat(5000));
    let e = Config::from_toml(&text)
        .expect_err("unterminated")
        .to_string();
    assert!(
        e.len() < 1000 && e.contains("…") && e.contains("line 1"),
        "{e}"
    );
    // The message's own lines stay whole (here the list of known fields).
    let text = format!("x = \"{}\"\n", "a".repeat(5000));
    let e = Config::from_toml(&text).expect_err("unknown").to_string();
    assert!(e.len() < 2000 && e.contains("`routes`"), "{e}");
    let text = format!("[limits]\nmax_connections = \"{}\"\n", "9".repeat(5000));
    let e = Config::from_toml(&text).expect_err("a string").to_string();
    assert!(e.len() < 1500 && e.contains("line 2"), "{e}");

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, b"[limits]\nmax_conn\xc3\xa9ctions = 5 # \xff\n").expect("write");
    let e = Config::load(&path).expect_err("not UTF-8").to_string();
    assert!(
        e.contains("bad.toml is not UTF-8") && e.contains("line 2, column 23 (byte 32)"),
        "{e}"
    );
}

/// Type errors say what is expected in words, not in Rust's type names.
#[test]
fn a_type_error_names_no_rust_type() {
    for (text, words, rust) in [
        (
            "shutdown_timeout_secs = -5\n",
            "expected a whole number from 0 to 18446744073709551615",
            "u64",
        ),
        (
            "[[listeners]]\nport = 8080\nbacklog = \"x\"\n",
            "expected a whole number from 0 to 4294967295",
            "u32",
        ),
        (
            "[limits]\nmax_connections = 99999999999999999999999\n",
            "(too large)",
            "i128",
        ),
        ("logging = \"json\"\n", "expected a table", "struct Logging"),
    ] {
        let e = Config::from_toml(text).expect_err(text).to_string();
        assert!(e.contains(words) && !e.contains(rust), "{e}");
    }
    assert_eq!(
        super::errors::plain_types("expected u8x; expected u16"),
        "expected u8x; expected a whole number from 0 to 65535"
    );
}

#[test]
fn size_errors_say_what_is_wrong() {
    let e = ByteSize::parse("1.5M").expect_err("a fraction");
    assert!(e.contains("fractions are not accepted"), "{e}");
    let e = ByteSize::parse("10 gbytes").expect_err("no such unit");
    assert!(e.contains("unknown size unit \"gbytes\""), "{e}");
    let text = "[[listeners]]\nport = 8080\nnotsent_lowat_bytes = \"8G\"\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n";
    let c = Config::from_toml(text).expect("a size");
    let e = c.validate().expect_err("too large").to_string();
    assert!(
        e.contains("listeners[0].notsent_lowat_bytes")
            && e.contains("between 16384 and 1073741824"),
        "{e}"
    );
}

/// An https:// server with a bad port is reported as that, not also as an origin "without
/// https servers" for its `ca_file` and `sni`.
#[test]
fn an_unparsable_https_server_is_not_also_an_origin_without_https() {
    let c = parse(
        "[[origins]]\nname = \"o\"\nservers = [\"https://o.example:0\"]\nca_file = \"/ca.pem\"\n\
         sni = \"o.example\"\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n",
    );
    let errors = c.field_errors();
    let fields: Vec<String> = errors.iter().map(|e| e.field.to_string()).collect();
    assert_eq!(fields, ["origins[0].servers[0]"], "{errors:?}");
}

/// Without `sni`, an https origin's `host` (its port cut off) is the name its certificate is
/// checked against: one that is no DNS name is refused here, naming the field, not at start-up
/// (the server refused to start on a configuration check-config had passed).
#[test]
fn a_host_that_cannot_be_the_tls_name_is_refused_without_sni() {
    let with = |host: &str, extra: &str| {
        parse(&format!(
            "[[origins]]\nname = \"o\"\nservers = [\"https://o.example\"]\nhost = \"{host}\"\n{extra}\
             [[volumes]]\nname = \"a\"\npath = \"/a\"\n"
        ))
        .field_errors()
    };
    for host in ["-cdn.example.com", "a..b", "cdn.123:8443", &"x".repeat(64)] {
        let errors = with(host, "");
        assert!(
            errors.iter().any(|e| e.field == "origins[0].host"
                && e.to_string().contains("TLS name")
                && e.to_string().contains("sni")),
            "{host}: {errors:?}"
        );
    }
    // With sni set, host is only the Host header; and a good name passes.
    assert!(with("-cdn.example.com", "sni = \"o.example\"\n").is_empty());
    assert!(with("cdn.example.com:8443", "").is_empty());
    assert!(with("[::1]:8443", "").is_empty());
}

/// An index name is one plain file name: no `/`, and no NUL byte, which no file name holds
/// (every directory request failed on it).
#[test]
fn an_index_name_with_a_nul_byte_is_refused() {
    let c = parse("[http]\nindex = [\"index\\u0000.html\", \"a/b\", \"index.html\"]\n[[volumes]]\nname = \"a\"\npath = \"/a\"\n");
    let fields: Vec<String> = c
        .field_errors()
        .iter()
        .map(|e| e.field.to_string())
        .collect();
    assert_eq!(fields, ["http.index[0]", "http.index[1]"]);
}
