//! The caching node's command line and config through the real binary: `check-config` on a
//! cache config (normalized TOML, field-named errors), `serve --origin URL --cache-dir DIR...`
//! (starts; its flag mistakes are clear errors).

mod common;

use common::*;

const CACHE_CONFIG: &str = include_str!("data/cache-split.toml");

#[test]
fn check_config_normalizes_a_cache_config() {
    let v = check_config_ok(CACHE_CONFIG);
    let o = &v["origins"][0];
    assert_eq!(o["connect_timeout_ms"].as_integer(), Some(2000));
    assert_eq!(o["read_timeout_ms"].as_integer(), Some(10_000));
    assert_eq!(o["max_connections"].as_integer(), Some(256));
    assert_eq!(o["host"].as_str(), Some("bucket.example"));
    let c1 = &v["volumes"][0]["cache"];
    assert_eq!(
        c1["max_size"].as_integer(),
        Some(10 << 30),
        "max_size in bytes:\n{v}"
    );
    assert_eq!(c1["inactive_secs"].as_integer(), Some(600));
    assert_eq!(c1["min_uses"].as_integer(), Some(1));
    assert_eq!(c1["slice_size"].as_integer(), Some(1 << 20));
    assert_eq!(v["volumes"][1]["cache"]["slice_size"].as_integer(), Some(0));
    let policy = &v["routes"][0]["cache"];
    assert_eq!(policy["stale_if_error_secs"].as_integer(), Some(86_400));
    assert_eq!(policy["valid"][1]["status"][0].as_integer(), Some(404));
    assert_eq!(v["admin"]["purge_token_file"].as_str(), Some(""));
}

#[test]
fn check_config_names_bad_cache_fields() {
    let bad = CACHE_CONFIG
        .replace("\"https://origin.example\"", "\"origin.example\"")
        .replace("origin = \"origin\"", "origin = \"x\"")
        .replace("[volumes.cache]\nslice_size = 0", "");
    check_config_fails(
        &bad,
        &[
            "origins[0].servers[1]: \"origin.example\" must start with http:// or https://",
            "routes[0].origin: no origin named \"x\"",
            "routes[0].split[1].volume: \"disk2\" has no [volumes.cache]; a cache route needs cache volumes",
        ],
    );
}

/// Origin server URLs that used to be accepted and then mis-parsed (an unbracketed IPv6 address
/// read as host `:` port 1, a port with a sign or leading zero sent on in the Host header) are
/// errors naming their `origins[N].servers[M]`.
#[test]
fn check_config_rejects_malformed_origin_servers() {
    let bad = [
        "http://::1",
        "http://fe80::1",
        "http://127.0.0.1:+21050",
        "http://127.0.0.1:021050",
        "http://[zzz]:80",
    ];
    let list = |urls: &[&str]| {
        urls.iter()
            .map(|u| format!("{u:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let toml = |urls: &[&str]| {
        format!(
            "[[origins]]\nname = \"o\"\nservers = [\"http://127.0.0.1:8081\", {}]\n[[volumes]]\nname = \"c\"\npath = \"/mnt/c\"\n[volumes.cache]\n",
            list(urls)
        )
    };
    check_config_fails(
        &toml(&bad),
        &[
            "origins[0].servers[1]: \"http://::1\": an IPv6 address must be written in brackets",
            "origins[0].servers[2]: \"http://fe80::1\": an IPv6 address must be written in brackets",
            "origins[0].servers[3]: \"http://127.0.0.1:+21050\" has an invalid port \"+21050\"",
            "origins[0].servers[4]: \"http://127.0.0.1:021050\" has an invalid port \"021050\"",
            "origins[0].servers[5]: \"http://[zzz]:80\": [zzz] is not an IPv6 address",
        ],
    );
    let v = check_config_ok(&toml(&[
        "http://[fe80::1]:8080",
        "https://origin.example:443",
    ]));
    assert_eq!(v["origins"][0]["servers"].as_array().map(Vec::len), Some(3));
    // --origin is checked the same way.
    let (code, _, err) = run(&["serve", "--origin", "http://::1", "--cache-dir", "/tmp/c"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("origins[0].servers[0]") && err.contains("in brackets"),
        "{err}"
    );
}

/// An origin's `host` (the Host header it is sent) is a valid `host[:port]`: an IPv6 address
/// in brackets, a port 1-65535; nginx answers 400 to `Host: ::1`, and an https origin would
/// have derived a TLS name from it that no one wrote.
#[test]
fn check_config_rejects_origin_hosts_that_are_no_host_header() {
    let toml = |host: &str| {
        format!(
            "[[origins]]\nname = \"o\"\nservers = [\"https://127.0.0.1:8443\"]\nhost = {host:?}\n[[volumes]]\nname = \"c\"\npath = \"/mnt/c\"\n[volumes.cache]\n"
        )
    };
    for (host, why) in [
        ("::1", "needs brackets"),
        ("a:99999", "port must be 1-65535"),
        ("a:0", "port must be 1-65535"),
        ("a:", "port must be 1-65535"),
        ("a b", "not a valid Host header value"),
        ("[::1", "not a valid Host header value"),
        ("[zz]:80", "not a valid Host header value"),
        ("", "not a valid Host header value"),
    ] {
        check_config_fails(&toml(host), &["origins[0].host", &format!("{host:?}"), why]);
    }
    for host in [
        "bucket.example",
        "bucket.example:8443",
        "[::1]",
        "[::1]:8443",
        "10.0.0.1:80",
    ] {
        check_config_ok(&toml(host));
    }
}

/// `max_size` is at most 4 EiB: "16777215T" was accepted and exported as a negative
/// `contentserver_cache_max_bytes`.
#[test]
fn check_config_caps_max_size() {
    let with = |size: &str| {
        format!(
            "[[origins]]\nname = \"o\"\nservers = [\"http://127.0.0.1:8081\"]\n[[volumes]]\nname = \"c\"\npath = \"/mnt/c\"\n[volumes.cache]\nmax_size = {size}\n"
        )
    };
    for huge in ["\"16777215T\"", "\"4194305T\"", "9223372036854775807"] {
        check_config_fails(
            &with(huge),
            &[
                "volumes[0].cache.max_size: ",
                "is more than 4611686018427387904 (4 EiB",
            ],
        );
    }
    let v = check_config_ok(&with("\"4194304T\""));
    assert_eq!(
        v["volumes"][0]["cache"]["max_size"].as_integer(),
        Some(1 << 62)
    );
}

#[test]
fn serve_origin_flag_mistakes_are_clear_errors() {
    let (code, _, err) = run(&["serve", "--origin", "http://127.0.0.1:1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--origin needs at least one --cache-dir"),
        "{err}"
    );
    let (code, _, err) = run(&["serve", "--cache-dir", "/tmp"]);
    assert_eq!(code, 1);
    assert!(err.contains("--cache-dir needs --origin URL"), "{err}");
    // Exit 1 like the two above (it was clap's exit 2), with --origin too.
    for extra in [
        &["--cache-dir", "/tmp"][..],
        &["--origin", "http://127.0.0.1:1"],
        &["--origin", "http://127.0.0.1:1", "--cache-dir", "/tmp"],
    ] {
        let mut args = vec!["serve", "--root", "/tmp"];
        args.extend_from_slice(extra);
        let (code, _, err) = run(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("--root serves a directory as is; it cannot be combined with --origin or --cache-dir"),
            "{args:?}: {err}"
        );
    }
    // --config with any of them is a command-line syntax error (clap: exit 2).
    let (code, _, err) = run(&["serve", "--config", "/tmp/x.toml", "--cache-dir", "/tmp"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["serve", "--origin", "ftp://x", "--cache-dir", "/tmp"]);
    assert_eq!(code, 1);
    assert!(err.contains("origins[0].servers[0]"), "{err}");
}

#[test]
fn serve_origin_with_cache_dirs_starts() {
    let d = tempdir();
    let (c1, c2) = (d.path().join("c1"), d.path().join("c2"));
    std::fs::create_dir_all(&c1).unwrap();
    std::fs::create_dir_all(&c2).unwrap();
    let s = Server::spawn(
        &[
            "serve",
            "--origin",
            "http://127.0.0.1:9",
            "--cache-dir",
            c1.to_str().unwrap(),
            "--cache-dir",
            c2.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "",
        ],
        &[],
    );
    let logs = s.logs();
    assert!(
        logs.contains("volume=cache1") && logs.contains("volume=cache2"),
        "{logs}"
    );
    // A request gets an HTTP answer (whatever the cache does with an unreachable origin), and
    // the server is still there afterwards.
    let r = s.get("/some/object");
    assert!((400..600).contains(&r.status), "{}", r.status);
    let r = s.get("/other");
    assert!((400..600).contains(&r.status), "{}", r.status);
}

/// A second node whose cache directories include one a running node holds is refused before
/// it makes anything: another, new, directory of its command line is not created (it was, and
/// stayed behind).
#[test]
fn a_refused_second_node_makes_no_directory() {
    let d = tempdir();
    let (held, new) = (d.path().join("held"), d.path().join("new"));
    let held_s = held.to_str().expect("a UTF-8 path");
    // `serve --origin` over `dirs`, no admin port.
    let args = |dirs: &[&str]| {
        let mut a = vec!["serve", "--origin", "http://127.0.0.1:9"];
        for dir in dirs {
            a.extend(["--cache-dir", dir]);
        }
        a.extend(["--listen", "127.0.0.1:0", "--admin-listen", ""]);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let first: Vec<String> = args(&[held_s]);
    let _first = Server::spawn(&first.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let second = args(&[new.to_str().expect("a UTF-8 path"), held_s]);
    let (code, _, err) = run(&second.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("in use by another process"), "{err}");
    assert!(err.contains(held_s), "{err}");
    assert!(!new.exists(), "the refused node made {}", new.display());
    // The same for a directory inside the held one (one of its levels).
    let inside = held.join("3");
    let second = args(&[
        new.to_str().expect("a UTF-8 path"),
        inside.to_str().expect("UTF-8"),
    ]);
    let (code, _, err) = run(&second.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is inside"), "{err}");
    assert!(!new.exists(), "the refused node made {}", new.display());
}

/// A missing cache directory is created (and said so), as nginx creates a `proxy_cache_path`;
/// a missing parent (a disk not mounted where the command says) stops the start naming the
/// path, instead of caching on whatever filesystem is there (it was created with its parents).
#[test]
fn a_missing_cache_directory_is_created_but_not_its_parents() {
    let d = tempdir();
    let args = |dir: &std::path::Path| {
        vec![
            "serve".to_string(),
            "--origin".into(),
            "http://127.0.0.1:9".into(),
            "--cache-dir".into(),
            dir.to_str().unwrap().into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--admin-listen".into(),
            "".into(),
        ]
    };
    let unmounted = d.path().join("mnt/disk1/cache");
    let a = args(&unmounted);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let err = Server::try_spawn(&a, &[])
        .err()
        .expect("started with a cache under a missing directory");
    assert!(
        err.contains(&format!("cannot create {}", unmounted.display()))
            && err.contains("does not exist"),
        "{err}"
    );
    assert!(!d.path().join("mnt").exists(), "parents were created");

    let fresh = d.path().join("cache1");
    let a = args(&fresh);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let s = Server::spawn(&a, &[]);
    assert!(fresh.is_dir());
    assert!(
        s.logs().contains("created the cache directory"),
        "{}",
        s.logs()
    );

    // Nothing is made inside the cache directory of a running node: refused first.
    let inside = fresh.join("zz1");
    let a = args(&inside);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let err = Server::try_spawn(&a, &[])
        .err()
        .expect("started inside another node's cache directory");
    assert!(
        err.contains("the cache directory of another process"),
        "{err}"
    );
    assert!(!inside.exists(), "made inside the running node's cache");
    // Nor a cache directory holding a running node's where its levels go (the parent of a
    // node at `L1`, `L1/L2` or `.tmp`): refused too, naming the other.
    let outer = d.path().join("outer");
    let nested = outer.join("3");
    std::fs::create_dir_all(&nested).unwrap();
    let a = args(&nested);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let _nested = Server::spawn(&a, &[]);
    let a = args(&outer);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let err = Server::try_spawn(&a, &[])
        .err()
        .expect("started around another node's cache directory");
    assert!(
        err.contains(&format!("holds {}", nested.display()))
            && err.contains("the cache directory of another process"),
        "{err}"
    );

    // A bad purge token file stops the start before a cache directory is made.
    let later = d.path().join("cache2");
    let conf = d.path().join("token.toml");
    std::fs::write(
        &conf,
        format!(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n[admin]\nlisten = \"127.0.0.1:0\"\npurge_token_file = \"{}\"\n[[origins]]\nname = \"o\"\nservers = [\"http://127.0.0.1:9\"]\n[[volumes]]\nname = \"c\"\npath = \"{}\"\n[volumes.cache]\n",
            d.path().join("no-token").display(),
            later.display()
        ),
    )
    .unwrap();
    let err = Server::try_spawn(&["serve", "--config", conf.to_str().unwrap()], &[])
        .err()
        .expect("started without its purge token file");
    assert!(err.contains("purge_token_file"), "{err}");
    assert!(
        !later.exists(),
        "the cache directory was made before the token was checked"
    );
}

/// `strip_prefix` on a cache route was accepted and ignored (the origin got the whole path):
/// now an error naming it.
#[test]
fn check_config_refuses_strip_prefix_on_a_cache_route() {
    let bad = CACHE_CONFIG.replacen(
        "origin = \"origin\"",
        "origin = \"origin\"\nstrip_prefix = true",
        1,
    );
    assert_ne!(bad, CACHE_CONFIG);
    check_config_fails(
        &bad,
        &["routes[0].strip_prefix: a cache route asks the origin"],
    );
}

/// `admin.purge_token_file` is a path the server can use for a purge endpoint that exists:
/// blank (it used to be "off" at serve while check-config kept it), relative (like
/// `ca_file`), with a NUL byte, with no cache volume or with the admin listener off is an
/// error naming the field.
#[test]
fn check_config_refuses_purge_token_files_that_do_nothing() {
    let with = |admin: &str| format!("{CACHE_CONFIG}\n[admin]\n{admin}\n");
    for (admin, want) in [
        (
            "purge_token_file = \"   \"",
            "admin.purge_token_file: \"   \" is blank: leave it out",
        ),
        (
            "purge_token_file = \"secrets/token\"",
            "admin.purge_token_file: \"secrets/token\" must be an absolute path",
        ),
        (
            "purge_token_file = \"/run/tok\\u0000en\"",
            "admin.purge_token_file: \"/run/tok\\0en\" contains a NUL byte",
        ),
        (
            "purge_token_file = \"/run/token\"\nlisten = \"\"",
            "admin.purge_token_file: POST /cache/purge is served on the admin listener, which admin.listen = \"\" turns off",
        ),
    ] {
        check_config_fails(&with(admin), &[want]);
    }
    let v = check_config_ok(&with("purge_token_file = \"/run/token\""));
    assert_eq!(v["admin"]["purge_token_file"].as_str(), Some("/run/token"));
    // A static server has nothing to purge.
    check_config_fails(
        "[admin]\npurge_token_file = \"/run/token\"\n[[volumes]]\nname = \"v\"\npath = \"/srv/v\"\n",
        &["admin.purge_token_file: POST /cache/purge deletes cached objects, and no volume has [volumes.cache]"],
    );
}

/// One cache volume and no routes, with no origin or two: the error is about the missing
/// route (it used to name `routes[0].volume`, a field not in the file).
#[test]
fn a_lone_cache_volume_without_one_origin_asks_for_a_route() {
    let vol = "[[volumes]]\nname = \"a\"\npath = \"/mnt/a\"\n[volumes.cache]\n";
    let origin =
        |n: &str| format!("[[origins]]\nname = \"{n}\"\nservers = [\"http://127.0.0.1:8081\"]\n");
    for (origins, count) in [(String::new(), 0), (origin("o1") + &origin("o2"), 2)] {
        let err = check_config_fails(
            &format!("{origins}{vol}"),
            &[&format!(
                "routes: no [[routes]], and the implicit \"/\" route to cache volume \"a\" has no origin (it takes the origin only when exactly one [[origins]] is defined; there are {count}): add a [[routes]]"
            )],
        );
        assert!(!err.contains("routes[0]"), "{err}");
    }
    let v = check_config_ok(&format!("{}{vol}", origin("o1")));
    assert_eq!(v["routes"][0]["origin"].as_str(), Some("o1"));
}

/// Sizes: `max_size`, `slice_size` and the byte limits take the same forms (integer bytes, or
/// a number with K/M/G/T, KB, Ki or KiB, all binary; `"10Gi"` was refused while `"10 GiB"`
/// passed, and `slice_size = "1M"` was refused), and check-config prints them as integers
/// that read back the same.
#[test]
fn every_byte_size_takes_the_same_forms() {
    let toml = |max: &str, slice: &str, chunk: &str| {
        format!(
            "[limits]\nsendfile_max_chunk = {chunk}\nmax_header_bytes = \"16Ki\"\n[[listeners]]\naddress = \"127.0.0.1\"\nnotsent_lowat_bytes = \"1MiB\"\n[[origins]]\nname = \"o\"\nservers = [\"http://127.0.0.1:8081\"]\n[[volumes]]\nname = \"c\"\npath = \"/mnt/c\"\n[volumes.cache]\nmax_size = {max}\nslice_size = {slice}\n"
        )
    };
    for (max, slice, chunk) in [
        ("\"10Gi\"", "\"512K\"", "\"1M\""),
        ("\"10 GiB\"", "\"512 KiB\"", "\"1 mb\""),
        ("\"10GB\"", "524288", "1048576"),
        ("10737418240", "\"512k\"", "\"1Mi\""),
    ] {
        let v = check_config_ok(&toml(max, slice, chunk));
        let c = &v["volumes"][0]["cache"];
        assert_eq!(c["max_size"].as_integer(), Some(10 << 30), "{max}");
        assert_eq!(c["slice_size"].as_integer(), Some(512 << 10), "{slice}");
        let l = &v["limits"];
        assert_eq!(
            l["sendfile_max_chunk"].as_integer(),
            Some(1 << 20),
            "{chunk}"
        );
        assert_eq!(l["max_header_bytes"].as_integer(), Some(16 << 10));
        assert_eq!(
            v["listeners"][0]["notsent_lowat_bytes"].as_integer(),
            Some(1 << 20)
        );
    }
    check_config_fails(
        &toml("\"10Gx\"", "0", "1048576"),
        &["unknown size unit \"Gx\" (use B, K, M, G or T, also as KB, Ki or KiB: all binary)"],
    );
    check_config_fails(
        &toml("\"10G\"", "\"1.5M\"", "1048576"),
        &[
            "slice_size = \"1.5M\"",
            "\"1.5M\": fractions are not accepted",
        ],
    );
    // A size out of the field's range is refused with the range (not the width of an integer
    // type it might have been held in).
    check_config_fails(
        &toml("\"10G\"", "0", "1048576").replace("\"1MiB\"", "\"4G\""),
        &[
            "notsent_lowat_bytes",
            "must be 0 (the kernel's default) or between 16384 and 1073741824",
        ],
    );
}

/// A start refused by something that needs no directory (a data or admin port in use, an
/// origin CA file that cannot be read) is refused before the cache directories are made, and
/// before any port serves: it used to make the directory, bind and serve the data port, then
/// fail on the admin port.
#[test]
fn a_start_refused_for_a_port_or_a_ca_file_makes_no_directory() {
    let d = tempdir();
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy = held.local_addr().expect("addr").to_string();
    let new = d.path().join("new");
    let new_s = new.to_str().expect("a UTF-8 path");
    let base = [
        "serve",
        "--origin",
        "http://127.0.0.1:9",
        "--cache-dir",
        new_s,
    ];
    for (ports, want) in [
        (
            ["--listen", "127.0.0.1:0", "--admin-listen", &busy],
            "admin.listen",
        ),
        (["--listen", &busy, "--admin-listen", ""], "listeners[0]"),
    ] {
        let args: Vec<&str> = base.iter().chain(ports.iter()).copied().collect();
        let (code, _, err) = run(&args);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(!err.contains("listening"), "{want}: it served first: {err}");
        assert!(
            !new.exists(),
            "{want}: the refused start made {}",
            new.display()
        );
    }
    let cfg = d.path().join("ca.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[origins]]\nname = \"o\"\nservers = [\"https://127.0.0.1:9\"]\nca_file = \"{}\"\n\
             [[volumes]]\nname = \"c\"\npath = \"{new_s}\"\n[volumes.cache]\n\
             [[routes]]\nprefix = \"/\"\nvolume = \"c\"\norigin = \"o\"\n[routes.cache]\n\
             [[listeners]]\naddress = \"127.0.0.1\"\nport = 0\n[admin]\nlisten = \"\"\n",
            d.path().join("missing-ca.pem").display()
        ),
    )
    .unwrap();
    let (code, _, err) = run(&["serve", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("missing-ca.pem"), "{err}");
    assert!(!new.exists(), "the refused start made {}", new.display());

    // A FIFO in the CA file's place is refused at once: a blocking open waited for a writer
    // for ever, before the signal handlers could stop the process (only SIGKILL did).
    let fifo = d.path().join("missing-ca.pem");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let out = std::process::Command::new("timeout")
        .args([
            "-s",
            "KILL",
            "10",
            BIN,
            "serve",
            "--config",
            cfg.to_str().unwrap(),
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("run content-server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "missing-ca.pem is a FIFO: it must be a regular file holding PEM certificates"
        ),
        "{err}"
    );
    assert!(!new.exists(), "the refused start made {}", new.display());
}
