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
