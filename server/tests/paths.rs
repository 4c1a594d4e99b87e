//! Path handling over real sockets: percent-decoding, `..` and its encoded forms, NUL bytes,
//! symlinks leaving the volume (and those inside it that are refused too), non-regular files (a FIFO must not hang anything), and routing
//! (longest prefix, strip_prefix, split by the documented MurmurHash2 of the decoded path).

mod common;

use common::*;
use std::ffi::CString;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

/// base/vol (served) and base/outside/secret.txt (must never be served).
fn layout() -> tempfile::TempDir {
    let base = tempdir();
    let vol = base.path().join("vol");
    let out = base.path().join("outside");
    std::fs::create_dir_all(vol.join("sub")).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("secret.txt"), b"SECRET").unwrap();
    std::fs::write(vol.join("hello.txt"), b"hello").unwrap();
    std::fs::write(vol.join("a b.txt"), b"space").unwrap();
    std::fs::write(vol.join("sub/inner.txt"), b"inner").unwrap();
    symlink("../outside/secret.txt", vol.join("escape.txt")).unwrap();
    symlink(out.join("secret.txt"), vol.join("absolute.txt")).unwrap();
    symlink("../outside", vol.join("outdir")).unwrap();
    symlink("hello.txt", vol.join("alias.txt")).unwrap();
    symlink("../hello.txt", vol.join("sub/up.txt")).unwrap();
    base
}

fn raw_status(s: &Server, target: &str) -> (u16, Vec<u8>) {
    let r = s.get(target);
    (r.status, r.body)
}

fn check_traversal(offload: &str) {
    let base = layout();
    let s = Server::root(&base.path().join("vol"), &["--offload", offload]);
    assert_eq!(raw_status(&s, "/hello.txt"), (200, b"hello".to_vec()));
    assert_eq!(raw_status(&s, "/a%20b.txt"), (200, b"space".to_vec()));
    assert_eq!(
        raw_status(&s, "/sub/../hello.txt"),
        (200, b"hello".to_vec())
    );
    assert_eq!(
        raw_status(&s, "/sub/%2e%2e/hello.txt"),
        (200, b"hello".to_vec())
    );
    assert_eq!(raw_status(&s, "/sub%2finner.txt"), (200, b"inner".to_vec()));
    assert_eq!(raw_status(&s, "/alias.txt"), (200, b"hello".to_vec()));
    assert_eq!(raw_status(&s, "/sub/up.txt"), (200, b"hello".to_vec()));
    // Malformed or escaping paths are 400; paths leaving the volume through links are 404.
    let bad: &[&str] = &[
        "/../outside/secret.txt",
        "/%2e%2e/outside/secret.txt",
        "/%2E%2E%2Foutside%2Fsecret.txt",
        "/sub/../../outside/secret.txt",
        "/sub/%2e%2e%2f%2e%2e%2foutside/secret.txt",
        "/..%2foutside%2fsecret.txt",
        "/hello.txt%00.png",
        "/%00",
        "/bad%zzescape",
        "/trunc%2",
        // A '\\' is a separator to some origins: '..' next to one is refused everywhere.
        "/..\\outside\\secret.txt",
    ];
    let hidden: &[&str] = &[
        "/escape.txt",
        "/absolute.txt",
        "/outdir/secret.txt",
        "/%2foutside/secret.txt",
        "//etc/passwd",
    ];
    for (want, targets) in [(400, bad), (404, hidden)] {
        for &target in targets {
            let (st, body) = raw_status(&s, target);
            assert_eq!(st, want, "{target}");
            assert!(!body.windows(6).any(|w| w == b"SECRET"), "{target}");
        }
    }
}

#[test]
fn traversal_is_contained_offload_always() {
    check_traversal("always");
}

#[test]
fn traversal_is_contained_offload_never() {
    check_traversal("never");
}

fn check_links_inside_the_volume(offload: &str) {
    // The documented limit of RESOLVE_BENEATH: a link is followed only while every step of its
    // resolution stays beneath the root. Relative links that stay inside work (also through
    // `..` within the volume); an absolute link, or a relative one that climbs above the root,
    // is 404 even when its target lies inside the volume.
    let base = layout();
    let vol = base.path().join("vol");
    symlink(vol.join("hello.txt"), vol.join("absolute-inside.txt")).unwrap();
    symlink("../vol/hello.txt", vol.join("out-and-back.txt")).unwrap();
    symlink("sub", vol.join("subdir-link")).unwrap();
    symlink("../sub/inner.txt", vol.join("sub/up-and-down.txt")).unwrap();
    let s = Server::root(&vol, &["--offload", offload]);
    for (target, want) in [
        ("/alias.txt", (200, &b"hello"[..])),
        ("/sub/up.txt", (200, b"hello")),
        ("/sub/up-and-down.txt", (200, b"inner")),
        ("/subdir-link/inner.txt", (200, b"inner")),
        ("/subdir-link/up.txt", (200, b"hello")),
    ] {
        let (st, body) = raw_status(&s, target);
        assert_eq!((st, body.as_slice()), want, "{target}");
    }
    for target in ["/absolute-inside.txt", "/out-and-back.txt"] {
        assert_eq!(raw_status(&s, target).0, 404, "{target}");
    }
}

#[test]
fn links_inside_the_volume_offload_always() {
    check_links_inside_the_volume("always");
}

#[test]
fn links_inside_the_volume_offload_never() {
    check_links_inside_the_volume("never");
}

fn mkfifo(p: &Path) {
    let c = CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

fn check_special_files(offload: &str) {
    let d = tempdir();
    std::fs::write(d.path().join("ok.txt"), b"ok").unwrap();
    mkfifo(&d.path().join("pipe"));
    std::fs::create_dir(d.path().join("fifodir")).unwrap();
    mkfifo(&d.path().join("fifodir/index.html"));
    let _sock = std::os::unix::net::UnixListener::bind(d.path().join("sock")).unwrap();
    // One pool thread: a FIFO that blocked it would stall every later request.
    let s = Server::root(d.path(), &["--offload", offload, "--threads", "1"]);
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(raw_status(&s, "/pipe").0, 403);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
    assert_eq!(raw_status(&s, "/sock").0, 403);
    assert_eq!(raw_status(&s, "/fifodir/").0, 404);
    let t = Instant::now();
    assert_eq!(raw_status(&s, "/ok.txt"), (200, b"ok".to_vec()));
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn fifo_and_socket_are_refused_without_hanging_always() {
    check_special_files("always");
}

#[test]
fn fifo_and_socket_are_refused_without_hanging_never() {
    check_special_files("never");
}

#[test]
fn routes_prefix_strip_and_split() {
    let base = tempdir();
    let mk = |name: &str| {
        let p = base.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let main = mk("main");
    let media = mk("media");
    let stat = mk("static");
    std::fs::write(main.join("root.txt"), b"main root").unwrap();
    std::fs::write(main.join("mediax.txt"), b"main mediax").unwrap();
    std::fs::create_dir_all(media.join("media")).unwrap();
    std::fs::write(media.join("media/m.txt"), b"media m").unwrap();
    std::fs::write(stat.join("s.txt"), b"static s").unwrap();
    let shards = ["s1", "s2", "s3"];
    for sh in shards {
        let p = mk(sh);
        for i in 0..300 {
            std::fs::write(p.join(format!("f{i}.bin")), sh.as_bytes()).unwrap();
        }
    }
    let mut volumes = vec![
        volume("main", &main),
        volume("media", &media),
        volume("static", &stat),
    ];
    for sh in shards {
        volumes.push(volume(sh, &base.path().join(sh)));
    }
    let cfg = Config {
        volumes,
        routes: vec![
            route("/", "main"),
            route("/media", "media"),
            route("/static/", "static").strip_prefix(),
            split_route(
                "/split",
                &[("s1", Some(33.3)), ("s2", Some(33.3)), ("s3", None)],
            )
            .strip_prefix(),
        ],
        ..config(1)
    };
    let s = Server::start(&cfg);
    assert_eq!(raw_status(&s, "/root.txt"), (200, b"main root".to_vec()));
    assert_eq!(raw_status(&s, "/media/m.txt"), (200, b"media m".to_vec()));
    // "/media" matches whole segments only.
    assert_eq!(
        raw_status(&s, "/mediax.txt"),
        (200, b"main mediax".to_vec())
    );
    assert_eq!(raw_status(&s, "/static/s.txt"), (200, b"static s".to_vec()));
    assert_eq!(
        raw_status(&s, "/static/../root.txt"),
        (200, b"main root".to_vec())
    );

    let mut counts = [0usize; 3];
    let mut c = s.connect();
    for i in 0..300 {
        let path = format!("/split/f{i}.bin");
        let r = c.get(&path);
        assert_eq!(r.status, 200, "{path}");
        let got = shards
            .iter()
            .position(|sh| sh.as_bytes() == r.body)
            .unwrap();
        // The documented rule: nginx split_clients over MurmurHash2 of the decoded path.
        let h = content_server::resolve::murmur2(path.as_bytes()) as f64 / 4_294_967_296.0;
        let want = if h < 0.333 {
            0
        } else if h < 0.666 {
            1
        } else {
            2
        };
        assert_eq!(got, want, "{path} hash fraction {h}");
        counts[got] += 1;
    }
    for (sh, n) in shards.iter().zip(counts) {
        assert!((60..=140).contains(&n), "{sh} got {n} of 300: {counts:?}");
    }
    // Stable: the same path always lands on the same volume, encoded or not.
    let a = raw_status(&s, "/split/f7.bin");
    let b = raw_status(&s, "/split/%66%37.bin");
    assert_eq!(a, b);
}

/// A directory that may be searched but not read (mode 0311 here, 0711 for others) is answered
/// with its index file, as nginx answers it (it was a 403: the directory itself was opened for
/// reading before the index was looked for). Root reads any directory, so as root the server
/// runs as nobody (`setpriv`, util-linux).
#[test]
fn a_searchable_but_unreadable_directory_serves_its_index() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempdir();
    let www = d.path().join("www");
    let pubdir = www.join("pub");
    std::fs::create_dir_all(&pubdir).unwrap();
    std::fs::write(pubdir.join("index.html"), b"hi").unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let wrapper = as_nobody_when_root(&[&www, &pubdir, &pubdir.join("index.html")]);
    // Its owner (the server) may search it and write in it, not list it.
    std::fs::set_permissions(&pubdir, std::fs::Permissions::from_mode(0o311)).unwrap();
    let args = [
        "serve",
        "--root",
        www.to_str().unwrap(),
        "--admin-listen",
        "",
    ];
    let s = Server::try_spawn_wrapped(wrapper, &args, &[]).expect("serve");
    let r = s.get("/pub/");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hi"[..]));
    assert_eq!(s.get("/pub/index.html").status, 200);
    assert_eq!(s.get("/pub/missing.txt").status, 404);
    // Without an index it is still no listing.
    std::fs::set_permissions(&pubdir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::remove_file(pubdir.join("index.html")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100)); // open_file_cache valid_ms
    assert_eq!(s.get("/pub/").status, 404);
}
