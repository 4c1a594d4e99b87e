//! The command line of the real binary: `check-config` (normalized output, field-named errors,
//! exit codes), `serve` overrides (--listen/--port/--threads/--max-queue/--offload and the
//! limits) and bad input failing cleanly (exit 1, a message, never a panic).

mod common;

use common::*;

#[test]
fn check_config_prints_normalized_toml() {
    // Defaults are filled in and the implicit route appears.
    let back = check_config_ok("[[volumes]]\nname = \"disk1\"\npath = \"/srv/disk1\"\n");
    assert_eq!(back["volumes"][0]["pool"]["threads"].as_integer(), Some(32));
    assert_eq!(
        back["volumes"][0]["pool"]["max_queue"].as_integer(),
        Some(65536)
    );
    assert_eq!(back["volumes"][0]["offload"].as_str(), Some("auto"));
    assert_eq!(back["routes"][0]["prefix"].as_str(), Some("/"));
    assert_eq!(back["routes"][0]["volume"].as_str(), Some("disk1"));
    assert_eq!(
        back["limits"]["sendfile_max_chunk"].as_integer(),
        Some(2 * 1024 * 1024)
    );
}

#[test]
fn check_config_names_the_bad_fields() {
    check_config_fails(
        r#"
[limits]
sendfile_max_chunk = 10
[[volumes]]
name = "Disk_1"
path = "relative/dir"
[volumes.pool]
threads = 0
[[routes]]
prefix = "/media"
volume = "nope"
"#,
        &[
            "limits.sendfile_max_chunk",
            "volumes[0].name",
            "volumes[0].path",
            "volumes[0].pool.threads",
            "routes[0].volume",
        ],
    );
    // Syntax and unknown-field errors, and a missing file.
    check_config_fails(
        "[[volumes]]\nname = \"a\"\npath = \"/x\"\nbogus = 1\n",
        &["bogus"],
    );
    // A file that cannot be read, or is not UTF-8, is named once, by check-config and serve
    // alike (the latter with the bad byte's line and column too).
    let d = tempdir();
    let bin = d.path().join("bin.toml");
    std::fs::write(&bin, b"a = \"\xff\"\n").unwrap();
    let bin = bin.to_str().unwrap();
    for args in [
        &["check-config", "/nonexistent/c.toml"][..],
        &["serve", "--config", "/nonexistent/c.toml"],
        &["check-config", bin],
        &["serve", "--config", bin],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 1, "{args:?}");
        let file = args[args.len() - 1];
        assert_eq!(err.matches(file).count(), 1, "{args:?}: {err}");
        let why = if file == bin {
            "is not UTF-8 text: the first bad byte is at line 1, column 6"
        } else {
            "cannot read"
        };
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(
            err.matches("os error").count() <= 1,
            "the cause said twice: {err}"
        );
    }
}

/// A configuration that is a device, a directory or larger than 16 MiB is refused by name at
/// once: `check-config /dev/zero` read for ever, its memory growing by a gigabyte a second. A
/// pipe (`--config <(...)`) is still read.
#[test]
fn a_config_that_is_no_file_or_too_large_is_refused_at_once() {
    let d = tempdir();
    let big = d.path().join("big.toml");
    let line = format!("# {}\n", "x".repeat(1000));
    std::fs::write(&big, line.repeat(17 * 1024)).unwrap();
    let big = big.to_str().unwrap();
    let dir = d.path().to_str().unwrap();
    for (file, why) in [
        ("/dev/zero", "is a device"),
        (dir, "is a directory"),
        (big, "larger than 16 MiB"),
    ] {
        for args in [&["check-config", file][..], &["serve", "--config", file]] {
            let t = std::time::Instant::now();
            let (code, _, err) = run(args);
            assert_eq!(code, 1, "{args:?}: {err}");
            assert!(err.contains(file) && err.contains(why), "{args:?}: {err}");
            assert!(t.elapsed() < std::time::Duration::from_secs(5), "{args:?}");
        }
    }
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{BIN} check-config <(printf '[[volumes]]\\nname = \"a\"\\npath = \"{dir}\"\\n')"
        ))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("name = \"a\""));
}

/// A volume or an origin that no route names is accepted but warned of, by `check-config`
/// (on stderr, exit 0) and at start (a log line): most often a typo, such as a volume left out
/// of a `split`. It started without a word.
#[test]
fn volumes_and_origins_no_route_names_are_warned_of() {
    let d = tempdir();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let toml = format!(
        "[[volumes]]\nname = \"a\"\npath = {a:?}\n\n[[volumes]]\nname = \"b\"\npath = {b:?}\n\n\
         [[origins]]\nname = \"o\"\nservers = [\"http://127.0.0.1:9\"]\n\n\
         [[routes]]\nprefix = \"/\"\nvolume = \"a\"\n"
    );
    let path = d.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    let (code, _, err) = run(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: volumes[1] \"b\" is named by no route")
            && err.contains("warning: origins[0] \"o\" is named by no route"),
        "{err}"
    );
    assert!(!err.contains("volumes[0]"), "{err}");
    let mut cfg = Config::load(&path).expect("valid");
    cfg.listeners[0].port = 0;
    let s = Server::start(&cfg);
    assert!(
        s.wait_log(
            "volumes[1] \"b\" is named by no route",
            std::time::Duration::from_secs(5)
        ),
        "{}",
        s.logs()
    );
}

/// A refused start says why on stderr; a stderr nobody reads (a closed pipe) changes only
/// that: exit 1, not a panic's 101.
#[test]
fn a_refused_start_with_a_closed_stderr_exits_1() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into the array, each then owned once.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(r);
    let st = std::process::Command::new(BIN)
        .args(["serve", "--config", "/nonexistent/content-server.toml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(w))
        .status()
        .expect("run");
    assert_eq!(st.code(), Some(1), "{st:?}");
}

#[test]
fn serve_rejects_bad_input_cleanly() {
    let d = tempdir();
    let missing_dir = [
        "serve",
        "--root",
        "/nonexistent/dir",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "",
    ];
    for args in [
        missing_dir.to_vec(),
        vec![
            "serve",
            "--root",
            d.path().to_str().unwrap(),
            "--offload",
            "sometimes",
        ],
        vec![
            "serve",
            "--root",
            d.path().to_str().unwrap(),
            "--listen",
            "not-an-addr",
        ],
        vec![
            "serve",
            "--root",
            d.path().to_str().unwrap(),
            "--threads",
            "0",
            "--listen",
            "127.0.0.1:0",
        ],
        vec!["serve"],
    ] {
        let (code, _, err) = run(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(
            !err.is_empty() && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    // With nothing to serve, every way to say it is offered (exit 2, a command-line error).
    let (code, _, err) = run(&["serve"]);
    assert_eq!(code, 2, "{err}");
    for mode in [
        "--root <DIR>",
        "--origin <URL>",
        "--cache-dir <DIR>",
        "--config <FILE>",
    ] {
        assert!(err.contains(mode), "{mode}: {err}");
    }
    // The missing directory is named.
    let (_, _, err) = run(&missing_dir);
    assert!(err.contains("/nonexistent/dir"), "{err}");
    let (_, _, err) = run(&[
        "serve",
        "--root",
        "/tmp",
        "--threads",
        "0",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(err.contains("volumes[0].pool.threads"), "{err}");
    // --port is a port in plain digits, like the port of --listen and of origin URLs.
    for port in ["+80", "080", "70000", "8o", ""] {
        let (code, _, err) = run(&[
            "serve",
            "--root",
            "/tmp",
            "--listen",
            "127.0.0.1",
            "--port",
            port,
            "--admin-listen",
            "",
        ]);
        assert_ne!(code, 0, "--port {port:?}");
        assert!(err.contains("is not a port"), "--port {port:?}: {err}");
    }
}

/// `serve --root DIR --admin-listen "" ARGS...` (space-separated) for a DIR with one file
/// `f.txt` holding `f`.
fn serve_root(args: &str) -> (tempfile::TempDir, Server) {
    let d = tempdir();
    std::fs::write(d.path().join("f.txt"), b"f").unwrap();
    let mut all = vec!["serve", "--root", d.path().to_str().unwrap()];
    all.extend(["--admin-listen", ""]);
    all.extend(args.split_whitespace());
    let s = Server::spawn(&all, &[]);
    (d, s)
}

#[test]
fn serve_root_with_overrides() {
    let (_d, s) =
        serve_root("--listen 127.0.0.1 --port 0 --threads 3 --max-queue 7 --offload never");
    assert!(s.addr.ip().is_loopback());
    assert_ne!(s.addr.port(), 0);
    assert_eq!(s.get("/f.txt").body, b"f");
    let logs = s.logs();
    assert!(
        logs.contains("threads=3") && logs.contains("max_queue=7"),
        "{logs}"
    );
    assert!(logs.contains("offload=\"never\""), "{logs}");
    assert!(logs.contains("RLIMIT_NOFILE"), "{logs}");
}

#[test]
fn serve_limit_overrides_take_effect() {
    let (_d, s) = serve_root(
        "--listen 127.0.0.1:0 --backlog 77 --max-connections 1 --sendfile-max-chunk 4096 --idle-park-ms 0",
    );
    assert!(s.logs().contains("backlog=77"), "{}", s.logs());
    let mut first = s.connect();
    first.send(b"GET /f.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(first.response(false).unwrap().status, 200);
    // max_connections = 1: a second connection is answered 503 and closed at once (the first is
    // in the middle of its next request head, so it is not closed to make room).
    first.send(b"GET /f.txt HTTP/1.1\r\n");
    let mut second = s.connect();
    assert!(second.closed_within(std::time::Duration::from_secs(2)));
    let (code, _, err) = run(&[
        "serve",
        "--root",
        "/tmp",
        "--sendfile-max-chunk",
        "10",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("limits.sendfile_max_chunk"), "{err}");
    // Sizes as in the configuration file.
    let (_d, s) =
        serve_root("--listen 127.0.0.1:0 --sendfile-max-chunk 2M --notsent-lowat-bytes 1MiB");
    assert!(
        s.logs().contains("notsent_lowat_bytes=1048576"),
        "{}",
        s.logs()
    );
    assert_eq!(s.get("/f.txt").body, b"f");
    let (code, _, err) = run(&["serve", "--root", "/tmp", "--sendfile-max-chunk", "1.5M"]);
    assert_eq!(code, 2);
    assert!(err.contains("fractions are not accepted"), "{err}");
}

/// `--access-log` sets logging.access_log: one line per response with its peer, method, path,
/// status, bytes, duration and query, as `--help` and the README say (the help left out peer
/// and query); without it, no access line.
#[test]
fn serve_access_log_flag_logs_each_response() {
    let (code, help, _) = run(&["serve", "--help"]);
    assert_eq!(code, 0);
    let fields = "peer, method, path, status, bytes, duration_ms and query";
    assert!(
        help.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(fields),
        "{help}"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    assert!(
        readme
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains("peer, method, path, status, bytes, `duration_ms` and query, in that order"),
        "the README's --access-log fields differ"
    );
    let (_d, s) = serve_root("--listen 127.0.0.1:0 --access-log");
    assert_eq!(s.get("/f.txt?v=1").body, b"f");
    let line = r#"peer=127.0.0.1:"#;
    assert!(
        s.wait_log(r#"query="v=1""#, std::time::Duration::from_secs(5)) && s.logs().contains(line),
        "no peer and query in the access line:\n{}",
        s.logs()
    );
    let logs = s.logs();
    let access = logs
        .lines()
        .find(|l| l.contains(r#"query="v=1""#))
        .unwrap_or_default();
    let at = |needle: &str| access.find(needle).unwrap_or(usize::MAX);
    assert!(
        at("peer=") < at("method=")
            && at("method=") < at("path=")
            && at("path=") < at("status=")
            && at("status=") < at("bytes=")
            && at("bytes=") < at("duration_ms=")
            && at("duration_ms=") < at("query="),
        "the access line's fields are not in the documented order: {access}"
    );
    assert_eq!(s.get("/f.txt").body, b"f");
    assert_eq!(s.get("/missing.txt").status, 404);
    for line in [
        r#"path="/f.txt" status=200 bytes="#,
        r#"path="/missing.txt" status=404"#,
    ] {
        assert!(
            s.wait_log(line, std::time::Duration::from_secs(5)),
            "no access line {line:?}:\n{}",
            s.logs()
        );
    }
    assert!(s.logs().contains("duration_ms="), "{}", s.logs());

    let (_d, quiet) = serve_root("--listen 127.0.0.1:0");
    assert_eq!(quiet.get("/f.txt").body, b"f");
    // The line would be written within milliseconds; give the writer thread time anyway.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !quiet.logs().contains("path=\"/f.txt\""),
        "an access line without --access-log:\n{}",
        quiet.logs()
    );
}

/// `--idle-park-ms` sets limits.idle_park_ms: an idle keep-alive connection is parked (the
/// `contentserver_connections_parked` gauge) after the default 1 s, never with 0, and not
/// within seconds with 60000.
#[test]
fn serve_idle_park_ms_override_takes_effect() {
    let d = tempdir();
    std::fs::write(d.path().join("f.txt"), b"f").unwrap();
    let parked_after_idle = |extra: &[&str], wait: std::time::Duration| {
        let mut args = vec!["serve", "--root", d.path().to_str().unwrap()];
        args.extend(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
        args.extend(extra);
        let s = Server::spawn(&args, &[]);
        let mut c = s.connect();
        assert_eq!(c.get("/f.txt").status, 200);
        let parked = || s.metrics().get("contentserver_connections_parked", &[]);
        let seen = wait_until(wait, || parked() == 1.0);
        // Still open and answering after its wait.
        assert_eq!(c.get("/f.txt").body, b"f", "{extra:?}");
        seen
    };
    assert!(
        parked_after_idle(&[], std::time::Duration::from_secs(10)),
        "an idle connection was never parked with the default idle_park_ms"
    );
    for never in [["--idle-park-ms", "0"], ["--idle-park-ms", "60000"]] {
        assert!(
            !parked_after_idle(&never, std::time::Duration::from_millis(2500)),
            "{never:?}: an idle connection was parked within 2.5 s"
        );
    }
}

#[test]
fn serve_config_file_with_ipv6_listener() {
    let d = tempdir();
    std::fs::write(d.path().join("f.txt"), b"six").unwrap();
    let mut cfg = one_volume(0, volume("v", d.path()));
    cfg.listeners[0].address = "::1".into();
    cfg.admin.listen = String::new();
    let path = d.path().join("c.toml");
    std::fs::write(&path, cfg.to_toml().unwrap()).unwrap();
    // IPv6 loopback may be unavailable in some sandboxes; then the error must be clean.
    let probe = std::net::TcpListener::bind("[::1]:0");
    if probe.is_err() {
        let (code, _, err) = run(&["serve", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 1);
        assert!(err.contains("cannot listen on"), "{err}");
        return;
    }
    let s = Server::spawn(&["serve", "--config", path.to_str().unwrap()], &[]);
    assert!(s.addr.is_ipv6());
    assert_eq!(s.get("/f.txt").body, b"six");
}

/// `*` listens on every IPv4 and IPv6 address with one socket (what a pod of an IPv6-only or
/// dual-stack cluster needs): the listener and the admin listener answer on 127.0.0.1 and ::1,
/// and the access log shows an IPv4 client as IPv4, not as `::ffff:127.0.0.1`.
#[test]
fn star_listens_on_both_families_and_logs_ipv4_clients_as_ipv4() {
    let d = tempdir();
    std::fs::write(d.path().join("f.txt"), b"both").unwrap();
    let s = Server::spawn(
        &[
            "serve",
            "--root",
            d.path().to_str().unwrap(),
            "--listen",
            "*:0",
            "--admin-listen",
            "*:0",
            "--access-log",
        ],
        &[],
    );
    assert!(
        s.logs().contains("dual_stack=true"),
        "this kernel has IPv6: * is one dual-stack socket\n{}",
        s.logs()
    );
    for host in ["127.0.0.1", "::1"] {
        let ip: std::net::IpAddr = host.parse().unwrap();
        let at = |port| std::net::SocketAddr::new(ip, port);
        assert_eq!(get(at(s.addr.port()), "/f.txt").body, b"both", "{host}");
        assert_eq!(get(at(s.admin().port()), "/healthz").status, 200, "{host}");
    }
    assert!(
        s.wait_log("peer=127.0.0.1:", std::time::Duration::from_secs(5)),
        "{}",
        s.logs()
    );
    assert!(!s.logs().contains("::ffff:"), "{}", s.logs());
    // A second server cannot take the same port on any address of either family.
    let port = s.addr.port().to_string();
    let (code, _, err) = run(&[
        "serve",
        "--root",
        d.path().to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--admin-listen",
        "",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already in use"), "{err}");
    // `*` is named as written, with the socket it means.
    let (code, _, err) = run(&[
        "serve",
        "--root",
        d.path().to_str().unwrap(),
        "--listen",
        &format!("*:{port}"),
        "--admin-listen",
        "",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("cannot listen on *:{port} ([::]:{port})")),
        "{err}"
    );
}

/// Every duration field has an upper bound (one day for the connection timeouts, ten years for
/// cache lifetimes): 18446744073709551615 seconds passed check-config and then panicked each
/// worker at its first connection ("overflow when adding duration to instant").
#[test]
fn check_config_bounds_every_duration() {
    let huge = u64::MAX;
    let err = check_config_fails(
        &format!(
            r#"shutdown_timeout_secs = {huge}
[limits]
keepalive_timeout_secs = {huge}
header_read_timeout_secs = {huge}
send_timeout_secs = 86401
idle_park_ms = 86400001
[[origins]]
name = "o"
servers = ["http://127.0.0.1:1"]
[[volumes]]
name = "c"
path = "/srv/c"
[volumes.cache]
inactive_secs = {huge}
[[routes]]
prefix = "/"
volume = "c"
origin = "o"
[routes.cache]
stale_while_revalidate_secs = {huge}
stale_if_error_secs = 315360001
valid = [{{ status = [200], secs = {huge} }}]
"#
        ),
        &[
            "shutdown_timeout_secs: 18446744073709551615 must be at most 86400 (one day)",
            "limits.keepalive_timeout_secs: 18446744073709551615 must be between 1 and 86400",
            "limits.header_read_timeout_secs: 18446744073709551615 must be between 1 and 86400",
            "limits.send_timeout_secs: 86401 must be between 1 and 86400",
            "limits.idle_park_ms: 86400001 must be at most 86400000",
            "volumes[0].cache.inactive_secs",
            "routes[0].cache.stale_while_revalidate_secs",
            "routes[0].cache.stale_if_error_secs: 315360001 must be at most 315360000",
            "routes[0].cache.valid[0].secs",
        ],
    );
    assert!(!err.contains("panicked"), "{err}");
    // The bounds themselves are accepted.
    check_config_ok(
        r#"shutdown_timeout_secs = 86400
[limits]
keepalive_timeout_secs = 86400
header_read_timeout_secs = 86400
send_timeout_secs = 86400
idle_park_ms = 86400000
[[volumes]]
name = "v"
path = "/srv/v"
"#,
    );
}

/// `logging.level` must name real levels: `warning` (read by the tracing filter as a target
/// name) used to pass and silence every log line, start-up errors included.
#[test]
fn check_config_rejects_log_levels_that_are_not_levels() {
    let with_level = |level: &str| {
        format!("[logging]\nlevel = {level:?}\n[[volumes]]\nname = \"v\"\npath = \"/srv/v\"\n")
    };
    for bad in [
        "warning",
        "",
        "content_server",
        "info,content_server::cache=verbose",
        "=debug",
        "info, access=debug",
    ] {
        let err = check_config_fails(&with_level(bad), &["logging.level: "]);
        assert!(
            err.contains("trace, debug, info, warn, error, off"),
            "{bad:?}: {err}"
        );
    }
    for good in [
        "info",
        "WARN",
        "error",
        "off",
        "info,content_server::cache=debug",
        "warn,access=info",
    ] {
        let v = check_config_ok(&with_level(good));
        assert_eq!(v["logging"]["level"].as_str(), Some(good));
    }
    // serve refuses it too, before anything is logged.
    let d = tempdir();
    let path = d.path().join("c.toml");
    std::fs::write(&path, with_level("warning").replace("/srv/v", "/tmp")).unwrap();
    let (code, _, err) = run(&["serve", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("logging.level"), "{err}");
    // Naming the file, as its syntax errors do; the command line only when it changed what
    // the file says.
    assert!(err.contains(&format!("in {}:", path.display())), "{err}");
    assert!(!err.contains("with this command line"), "{err}");
    let (code, _, err) = run(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--threads",
        "2",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("in {} with this command line", path.display())),
        "{err}"
    );
}

/// `[[volumes]]` TOML of volume `name` at `path`, a cache volume when `cache`.
fn volume_toml(name: &str, path: &str, cache: bool) -> String {
    let cache = if cache { "[volumes.cache]\n" } else { "" };
    format!("[[volumes]]\nname = {name:?}\npath = {path:?}\n{cache}")
}

/// A config with an origin, the volumes `(name, path, cache)` and one route per volume
/// (`/NAME`, through the origin for cache volumes).
fn volumes_config(volumes: &[(&str, &str, bool)]) -> String {
    let mut t = String::from("[[origins]]\nname = \"o\"\nservers = [\"http://127.0.0.1:1\"]\n");
    for (name, path, cache) in volumes {
        t += &volume_toml(name, path, *cache);
    }
    for (name, _, cache) in volumes {
        let origin = if *cache { "origin = \"o\"\n" } else { "" };
        t += &format!("[[routes]]\nprefix = \"/{name}\"\nvolume = {name:?}\n{origin}");
    }
    t
}

/// A cache directory of its own: two cache volumes on one directory (however written), or a
/// cache directory inside a static root (its entry files, stored headers included, would be
/// served by the static route), or containing one, is an error naming both volumes.
#[test]
fn check_config_rejects_cache_directories_shared_or_nested() {
    for (volumes, want) in [
        (
            [("c1", "/a", true), ("c2", "/a/", true)],
            "volumes[1].path: /a/ of volume \"c2\" is the same directory as volumes[0].path /a of volume \"c1\"",
        ),
        (
            [("c1", "/x//y/./z", true), ("c2", "/x/q/../y/z", true)],
            "volumes[1].path: /x/q/../y/z of volume \"c2\" is the same directory as volumes[0].path",
        ),
        (
            [("www", "/srv/www", false), ("c", "/srv/www/cache", true)],
            "volumes[1].path: /srv/www/cache of volume \"c\" lies inside volumes[0].path /srv/www of volume \"www\"",
        ),
        (
            [("c", "/srv/cache/", true), ("www", "/srv/cache/../cache/public", false)],
            "volumes[1].path: /srv/cache/../cache/public of volume \"www\" lies inside volumes[0].path /srv/cache/ of volume \"c\"",
        ),
        (
            [("c", "/srv/www/c", true), ("www", "/srv", false)],
            "volumes[1].path: /srv of volume \"www\" contains volumes[0].path /srv/www/c of volume \"c\"",
        ),
    ] {
        check_config_fails(&volumes_config(&volumes), &[want]);
    }
    // Static volumes may share or nest roots; siblings whose names share a prefix are apart.
    check_config_ok(&volumes_config(&[
        ("a", "/srv/www", false),
        ("b", "/srv/www/", false),
        ("c", "/srv/www/sub", false),
        ("d", "/srv/wwwcache", true),
        ("e", "/srv/ww", true),
    ]));
}

/// `serve` compares the directories again with symlinks resolved: a cache directory reached
/// through a link into the static root is refused at start-up, naming both volumes.
#[test]
fn serve_rejects_a_cache_directory_inside_a_static_root_through_a_symlink() {
    let d = tempdir();
    let www = d.path().join("www");
    std::fs::create_dir_all(www.join("cache")).unwrap();
    let link = d.path().join("cache-link");
    std::os::unix::fs::symlink(www.join("cache"), &link).unwrap();
    let toml = volumes_config(&[
        ("www", www.to_str().unwrap(), false),
        ("c", link.to_str().unwrap(), true),
    ]);
    let path = d.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    // The paths as written are apart: check-config accepts them.
    let (code, _, err) = run(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    refused_for_overlap(&path, &["volumes[1].path", "(resolved to "]);
}

/// `serve --config path` exits 1 naming volume "c" inside volume 0 once symlinks are resolved
/// (and `more`).
fn refused_for_overlap(path: &std::path::Path, more: &[&str]) {
    let (code, _, err) = run(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let always = [
        "volume directories overlap once symlinks are resolved",
        "of volume \"c\" lies inside volumes[0].path",
    ];
    for want in always.iter().chain(more) {
        assert!(err.contains(want), "missing {want:?} in\n{err}");
    }
}

/// The same through a link to a directory that does not exist yet: the start is refused before
/// the cache directory is made, so nothing appears inside the static root.
#[test]
fn serve_refuses_a_missing_cache_directory_inside_a_static_root_before_making_it() {
    let d = tempdir();
    let www = d.path().join("www");
    std::fs::create_dir_all(www.join("media")).unwrap();
    let link = d.path().join("media-link");
    std::os::unix::fs::symlink(www.join("media"), &link).unwrap();
    let cache = link.join("cache");
    let toml = volumes_config(&[
        ("www", www.to_str().unwrap(), false),
        ("c", cache.to_str().unwrap(), true),
    ]);
    let path = d.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    refused_for_overlap(&path, &[]);
    assert!(
        !www.join("media/cache").exists(),
        "a refused start made the cache directory inside the static root"
    );
}

/// Route prefixes are checked as the router matches them: `/x` and `/x/` are one prefix (the
/// second route never matched), `//y//` and `/a%20b` never matched (requests are matched by
/// their decoded path with repeated `/` merged). Each is an error naming the route.
#[test]
fn check_config_rejects_route_prefixes_that_never_match() {
    let routes = |prefixes: &[&str]| {
        let mut t = String::from("[[volumes]]\nname = \"v\"\npath = \"/srv/v\"\n");
        for p in prefixes {
            t += &format!("[[routes]]\nprefix = {p:?}\nvolume = \"v\"\n");
        }
        t
    };
    check_config_fails(
        &routes(&["/x", "/x/", "//y//", "/a%20b", "/q?a", "/x"]),
        &[
            "routes[1].prefix: \"/x/\" is the same prefix as routes[0].prefix \"/x\" (a trailing '/' is ignored)",
            "routes[2].prefix: \"//y//\" has an empty segment ('//')",
            "write \"/y/\"",
            "routes[3].prefix: \"/a%20b\" contains '%': routes match the decoded request path",
            "routes[4].prefix: \"/q?a\" must not contain '?'",
            "routes[5].prefix: \"/x\" is the same prefix as routes[0].prefix \"/x\": each prefix",
        ],
    );
    // A NUL byte has its own message (it was "must not contain '.' or '..' segments").
    let err = check_config_fails(
        "[[volumes]]\nname = \"v\"\npath = \"/srv/v\"\n[[routes]]\nprefix = \"/a\\u0000b\"\nvolume = \"v\"\n",
        &["routes[0].prefix: \"/a\\0b\" contains a NUL byte: a request path holding one is refused (400), so it would never match"],
    );
    assert!(!err.contains("segments"), "{err}");
    // Written decoded and without repeated slashes they are fine; "/" and "/x/" differ.
    let v = check_config_ok(&routes(&["/", "/x/", "/y/", "/a b"]));
    assert_eq!(v["routes"].as_array().map(Vec::len), Some(4));
}

/// A prefix with a space, written decoded, matches the percent-encoded request.
#[test]
fn a_decoded_prefix_matches_the_encoded_request() {
    let d = tempdir();
    std::fs::create_dir_all(d.path().join("a b")).unwrap();
    std::fs::write(d.path().join("a b/f.txt"), b"spaced").unwrap();
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.admin.listen = String::new();
    cfg.routes = vec![route("/a b", "v")];
    let s = Server::start(&cfg);
    assert_eq!(s.get("/a%20b/f.txt").body, b"spaced");
    assert_eq!(s.get("/a%20bx/f.txt").status, 404);
}

/// `--listen ADDR` keeps the configured port and `--port N` the configured address (the port
/// used to fall back to 8080); malformed `--listen` values are refused instead of being read
/// as something else (`[[::1]]` was [::1]).
#[test]
fn serve_listen_and_port_override_only_what_they_name() {
    let d = tempdir();
    let mut cfg = one_volume(1, volume("v", d.path()));
    cfg.listeners[0].address = "127.0.0.2".into();
    let port = free_port();
    cfg.listeners[0].port = port;
    cfg.admin.listen = String::new();
    let path = d.path().join("c.toml");
    std::fs::write(&path, cfg.to_toml().unwrap()).unwrap();
    let serve = |args: &[&str]| {
        let mut all = vec!["serve", "--config", path.to_str().unwrap()];
        all.extend(args);
        Server::spawn(&all, &[])
    };
    // Only the address: the configured port stays.
    let s = serve(&["--listen", "127.0.0.3"]);
    assert_eq!(s.addr, format!("127.0.0.3:{port}").parse().unwrap());
    drop(s);
    // Only the port: the configured address stays.
    let s = serve(&["--port", "0"]);
    assert_eq!(s.addr.ip().to_string(), "127.0.0.2");
    assert_ne!(s.addr.port(), port);
    drop(s);
    // Both, in one flag or two.
    let s = serve(&["--listen", "127.0.0.3:0"]);
    assert_eq!(s.addr.ip().to_string(), "127.0.0.3");
    drop(s);
    let s = serve(&["--listen", "127.0.0.3", "--port", "0"]);
    assert_eq!(s.addr.ip().to_string(), "127.0.0.3");
    drop(s);

    for bad in [
        "[::1",
        "[[::1]]",
        "::1]",
        "[::1]x",
        "[127.0.0.1]:80",
        "127.0.0.1:+80",
        "127.0.0.1:080",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "localhost:80",
    ] {
        let (code, _, err) = run(&["serve", "--config", path.to_str().unwrap(), "--listen", bad]);
        // A malformed flag value: a command-line syntax error (exit 2), said with the value.
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(
            err.contains(&format!(
                "--listen {bad:?} is not ADDR, ADDR:PORT or [V6]:PORT"
            )),
            "{bad:?}: {err}"
        );
    }
    let (code, _, err) = run(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.3:0",
        "--port",
        "0",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already names a port"), "{err}");
    // The help says what the flags keep.
    let (_, help, _) = run(&["serve", "--help"]);
    assert!(
        help.contains("or else on the first configured listener's (0.0.0.0 by default)")
            && help.contains("or else the first configured listener's (8080 by default)"),
        "{help}"
    );
}

/// A volume root this process cannot search (no execute permission on it) stops the server
/// at start, naming it, where it would otherwise run "ready" and fail every request. Root
/// searches any directory, so as root the server runs as nobody (`setpriv`, util-linux).
#[test]
fn serve_refuses_a_root_it_cannot_search() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempdir();
    let www = d.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("f.txt"), b"f").unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Readable (a listing would work) but not searchable: no file beneath it can be opened.
    std::fs::set_permissions(&www, std::fs::Permissions::from_mode(0o644)).unwrap();
    let wrapper = as_nobody_when_root(&[&www]);
    let args = [
        "serve",
        "--root",
        www.to_str().unwrap(),
        "--admin-listen",
        "",
    ];
    match Server::try_spawn_wrapped(wrapper, &args, &[]) {
        Ok(_) => panic!("the server started on a root it cannot search"),
        Err(log) => assert!(
            log.contains("cannot search directory")
                && log.contains(www.to_str().unwrap())
                && log.contains("Permission denied"),
            "{log}"
        ),
    }
}

/// An empty or relative volume path is quoted in its error (an empty one was invisible).
#[test]
fn check_config_quotes_a_path_that_is_not_absolute() {
    for (path, want) in [
        ("", "volumes[0].path: \"\" must be an absolute path"),
        ("root", "volumes[0].path: \"root\" must be an absolute path"),
    ] {
        check_config_fails(
            &format!("[[volumes]]\nname = \"v\"\npath = \"{path}\"\n"),
            &[want],
        );
    }
}

/// A volume path with a NUL byte passed check-config and then failed at serve printing the raw
/// byte: it is an error naming the field, the byte escaped.
#[test]
fn check_config_refuses_a_nul_in_a_volume_path() {
    let err = check_config_fails(
        "[[volumes]]\nname = \"v\"\npath = \"/srv/a\\u0000b\"\n",
        &["volumes[0].path: \"/srv/a\\0b\" contains a NUL byte"],
    );
    assert!(!err.contains('\0'), "{err:?}");
}

/// A split target that gets no share (the one taking the rest after 100%) and a volume listed
/// twice in one split were accepted silently: errors naming the target.
#[test]
fn check_config_refuses_split_targets_without_a_share_or_listed_twice() {
    let split = |targets: &str| {
        format!(
            "[[volumes]]\nname = \"c1\"\npath = \"/srv/c1\"\n[[volumes]]\nname = \"c2\"\npath = \"/srv/c2\"\n[[routes]]\nprefix = \"/\"\nsplit = [{targets}]\n"
        )
    };
    check_config_fails(
        &split("{ volume = \"c1\", percent = 100.0 }, { volume = \"c2\" }"),
        &["routes[0].split[1]: \"c2\" takes the rest (no percent), but the targets before it add up to 100: it would get no requests"],
    );
    // A share too small for any URI hash (tester: 1e-12 was accepted), given or the rest.
    check_config_fails(
        &split("{ volume = \"c1\", percent = 1e-12 }, { volume = \"c2\" }"),
        &["routes[0].split[0].percent: 0.000000000001 is less than 0.0001, the smallest share"],
    );
    // The rest may be exactly the smallest share (0.0002 + 99.9997 is a little more in f64).
    check_config_ok(&format!(
        "[[volumes]]\nname = \"c3\"\npath = \"/srv/c3\"\n{}",
        split("{ volume = \"c1\", percent = 0.0002 }, { volume = \"c3\", percent = 99.9997 }, { volume = \"c2\" }")
    ));
    check_config_fails(
        &split("{ volume = \"c1\", percent = 99.99999 }, { volume = \"c2\" }"),
        &["routes[0].split[1]: \"c2\" takes the rest (no percent), but the targets before it add up to 99.99999"],
    );
    check_config_fails(
        &split("{ volume = \"c1\", percent = 50.0 }, { volume = \"c1\" }"),
        &["routes[0].split[1].volume: \"c1\" is already routes[0].split[0].volume: list each volume once"],
    );
    check_config_fails(
        &split("{ volume = \"c1\", percent = 50.0 }, { volume = \"c1\", percent = 50.0 }"),
        &["routes[0].split[1].volume: \"c1\" is already routes[0].split[0].volume"],
    );
    // A refused share is one error, not also a sum that leaves it out ("add up to 0").
    let err = check_config_fails(
        &split("{ volume = \"c1\", percent = 150.0 }"),
        &["routes[0].split[0].percent: 150 must be greater than 0 and at most 100"],
    );
    assert!(!err.contains("add up to"), "{err}");
    // Over 100 is said anyway: no refused share can bring the sum back.
    check_config_fails(
        &format!(
            "[[volumes]]\nname = \"c3\"\npath = \"/srv/c3\"\n{}",
            split("{ volume = \"c1\", percent = 60.0 }, { volume = \"c2\", percent = 60.0 }, { volume = \"c3\", percent = 0.0 }")
        ),
        &[
            "routes[0].split[2].percent: 0 must be greater than 0",
            "routes[0].split: percentages add up to 120, more than 100",
        ],
    );
    // And an admin port is written like every other port (SocketAddr took `025301`).
    check_config_fails(
        "[[volumes]]\nname = \"v\"\npath = \"/srv/v\"\n[admin]\nlisten = \"127.0.0.1:025301\"\n",
        &["admin.listen: \"127.0.0.1:025301\" is not ADDR:PORT"],
    );
    let v = check_config_ok(&split(
        "{ volume = \"c1\", percent = 99.5 }, { volume = \"c2\" }",
    ));
    assert_eq!(v["routes"][0]["split"].as_array().map(Vec::len), Some(2));
}

/// A table written as a TOML array was accepted, its values taken by field position
/// (`limits = [100, 5]` set max_connections and keepalive_timeout_secs): an error naming the
/// field, as for any other wrong type.
#[test]
fn check_config_refuses_tables_written_as_arrays() {
    check_config_fails(
        "limits = [100, 5]\n[[volumes]]\nname = \"a\"\npath = \"/srv/a\"\n",
        &[
            "field limits: a table is expected, not an array",
            "at line 1, column 10",
        ],
    );
    check_config_fails(
        "[[volumes]]\nname = \"a\"\npath = \"/srv/a\"\n[http.media_headers]\nm3u8 = [\"no-store\", 5]\n",
        &["field http.media_headers.m3u8: a table is expected", "at line 5, column 8"],
    );
    // An array of tables where one table belongs: the line of its header.
    check_config_fails(
        "[[volumes]]\nname = \"a\"\npath = \"/srv/a\"\n\n[[admin]]\nlisten = \"\"\n",
        &[
            "field admin: a table is expected, not an array",
            "at line 5, column 1",
        ],
    );
}

/// `check-config` whose output cannot be written (a reader that stopped early, a full disk)
/// exits 1 with a one-line error, never a panic.
#[test]
fn check_config_with_an_unwritable_stdout_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[[volumes]]\nname = \"disk1\"\npath = \"/srv/disk1\"\n",
    )
    .expect("write");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_content-server"))
        .arg("check-config")
        .arg(&cfg)
        .stdout(full)
        .output()
        .expect("run check-config");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("cannot write the normalized config"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Listeners whose sockets cannot both be bound (the same port on an address and on its
/// family's unspecified address) are a config error naming both, as for the admin listener;
/// IPv6 sockets are v6-only, so `::` and `0.0.0.0` on one port are fine.
#[test]
fn check_config_refuses_listeners_that_overlap_and_keeps_the_families_apart() {
    let cfg = |a: &str, b: &str, admin: &str| {
        format!(
            "[[listeners]]\naddress = \"{a}\"\nport = 29395\n[[listeners]]\naddress = \"{b}\"\nport = 29395\n[admin]\nlisten = \"{admin}\"\n[[volumes]]\nname = \"d\"\npath = \"/srv/d\"\n"
        )
    };
    for (a, b, written) in [
        ("127.0.0.1", "0.0.0.0", "127.0.0.1:29395"),
        ("::", "::1", "[::]:29395"),
    ] {
        check_config_fails(
            &cfg(a, b, ""),
            &["listeners[1]", "overlaps listeners[0]", written],
        );
    }
    check_config_ok(&cfg("::", "0.0.0.0", ""));
    // One address written two ways is one socket listed twice (it was said to overlap).
    check_config_fails(
        &cfg("::1", "0:0:0:0:0:0:0:1", ""),
        &["listeners[1]: [::1]:29395 is listed twice"],
    );
    // `*` takes the port on every address of both families.
    for other in ["0.0.0.0", "::1"] {
        check_config_fails(
            &cfg("*", other, ""),
            &[
                "listeners[1]",
                "overlaps listeners[0]",
                "* on every address",
            ],
        );
    }
    check_config_fails(
        &cfg("127.0.0.1", "::1", "*:29395"),
        &["admin.listen", "listeners[0]'s port"],
    );
    check_config_fails(&cfg("*", "127.0.0.1", "*"), &["admin.listen", "*:PORT"]);
    // IPv6 addresses are written with brackets when a port follows.
    check_config_fails(
        &cfg("::", "::1", ""),
        &["[::1]:29395 overlaps listeners[0] ([::]:29395)"],
    );
    // An IPv4-mapped address can never be bound on an IPv6-only socket: its IPv4 is meant.
    check_config_fails(
        &cfg("::ffff:127.0.0.1", "127.0.0.2", "[::ffff:127.0.0.1]:29399"),
        &[
            "listeners[0].address",
            "IPv4-mapped",
            "write 127.0.0.1",
            "admin.listen",
        ],
    );
    // The admin listener follows the same rule: 127.0.0.1 beside `::` on one port is fine.
    check_config_ok(&cfg("::", "0.0.0.0", "127.0.0.2:29396"));
    check_config_ok(
        "[[listeners]]\naddress = \"::\"\nport = 29396\n[admin]\nlisten = \"127.0.0.1:29396\"\n[[volumes]]\nname = \"d\"\npath = \"/srv/d\"\n",
    );
    check_config_fails(
        "[[listeners]]\naddress = \"0.0.0.0\"\nport = 29397\n[admin]\nlisten = \"127.0.0.1:29397\"\n[[volumes]]\nname = \"d\"\npath = \"/srv/d\"\n",
        &["admin.listen", "listeners[0]'s port"],
    );
}
