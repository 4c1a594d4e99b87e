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

const HLS_LIBRARY: &str = r#"
[http]
max_ranges = 8
[http.media_types]
key = "application/octet-stream"
M4S = "video/iso.segment"
[http.media_headers.m4s]
cache_control = "public, max-age=31536000, immutable"
[http.media_headers."application/vnd.apple.mpegurl"]
cache_control = "max-age=2"
expires_secs = 2
[http.media_headers."text/*"]
cache_control = "no-cache"

[[volumes]]
name = "disk1"
path = "/srv/disk1"

[[routes]]
prefix = "/vod"
volume = "disk1"
[routes.http]
precompressed = ["br", "zstd", "gzip"]
listing = true
[routes.http.headers]
add = { "X-Content-Type-Options" = "nosniff", "Strict-Transport-Security" = "max-age=63072000" }
[routes.http.media_headers.mpd]
cache_control = "max-age=5"
[routes.http.cors]
allow_origins = ["https://player.example", "https://*.cdn.example"]
max_age_secs = 600
"#;

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
    let c = parse(
        r#"
[http]
max_ranges = 5000
listing_max_entries = 0
[http.media_types]
"m.4s" = "video/iso.segment"
vtt = "not a type"
[http.media_headers."video/"]
cache_control = "x"
[http.media_headers.ts]
cache_control = "bad\u0001value"
add = { "Content-Length" = "1", "Bad Name" = "x", "X-Ok" = "line\nbreak", "Access-Control-Allow-Origin" = "*" }
[[volumes]]
name = "a"
path = "/a"
[[routes]]
prefix = "/"
volume = "a"
[routes.http]
precompressed = ["br", "br"]
[routes.http.headers]
expires_secs = 999999999999
[routes.http.cors]
allow_origins = ["*", "https://x.example/path"]
allow_credentials = true
allow_methods = ["DELETE"]
allow_headers = ["bad header"]
max_age_secs = 100000
"#,
    );
    let f = fields(&c);
    for want in [
        "http.max_ranges",
        "http.listing_max_entries",
        "http.media_types.m.4s",
        "http.media_types.vtt",
        "http.media_headers.\"video/\"",
        "http.media_headers.ts.cache_control",
        "http.media_headers.ts.add.Content-Length",
        "http.media_headers.ts.add.Bad Name",
        "http.media_headers.ts.add.X-Ok",
        "http.media_headers.ts.add.Access-Control-Allow-Origin",
        "routes[0].http.precompressed[1]",
        "routes[0].http.headers.expires_secs",
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
}
