//! The one harness of the server's integration tests: the real `content-server` binary, real
//! sockets, real files. Nothing here fakes server behaviour; everything goes through the
//! process's command line, its listeners and its log.
//!
//! ```ignore
//! mod common;
//! use common::*;
//!
//! let dir = content_dir(2, 1000);                        // f0.bin, f1.bin of 1000 bytes
//! let cfg = Config {                                     // the real server Config type
//!     volumes: vec![volume("media", dir.path()).offload(Offload::Always).pool(2, 0)],
//!     ..config(1)                                        // 127.0.0.1:0, admin on 127.0.0.1:0
//! };
//! let s = Server::start(&cfg);                           // writes cfg.to_toml(), waits for ready
//! let r = s.request("GET", "/f0.bin", &[("Range", "bytes=0-9")]);
//! assert_eq!((r.status, r.header("Content-Range")), (206, Some("bytes 0-9/1000")));
//! assert_eq!(s.metrics().get("contentserver_pool_threads", &[("volume", "media")]), 2.0);
//! ```
//!
//! - [`server`]: [`Server::start`] (a [`Config`]), [`Server::start_with_failpoints`],
//!   [`Server::root`] (`serve --root DIR`), [`Server::spawn`] (any command line); the listening
//!   and admin addresses come from the log lines `listening addr=…` and `admin listening on …`
//!   (ports are kernel-chosen), the log is captured ([`Server::logs`], [`Server::wait_log`]),
//!   signals and exit ([`Server::signal`], [`Server::wait_exit`], [`Server::stop`]); [`run`]
//!   runs the binary to completion, [`check_config`] checks a TOML text.
//! - [`http`]: [`Response`] (status, headers, body bytes); one-shot requests with
//!   `Connection: close` read to EOF ([`Server::get`], [`Server::request`], [`get`],
//!   [`request`]); [`Conn`] for keep-alive, pipelining and raw bytes, framed by Content-Length.
//! - [`metrics`]: [`Metrics`], the samples of a Prometheus text exposition
//!   ([`Server::metrics`] scrapes `/metrics`; [`Metrics::get`], [`Metrics::sum`]).
//! - [`config`]: test configurations built from the server's own [`Config`] types and rendered
//!   with `Config::to_toml()` ([`config`], [`volume`], [`route`], [`split_route`]).
//! - [`cache`]: a caching node (one cache volume `c1` in front of the origin `origin`) and what
//!   the cache tests look at ([`cache::origin_and_node`], [`cache::get`], [`cache::xcache`],
//!   [`cache::metric`], [`cache::settle`], [`cache::cache_files`]); used by path, not re-exported.
//! - [`files`]: temp dirs and deterministic contents ([`tempdir`], [`content_dir`], [`bytes`]),
//!   [`wait_until`].
//!
//! Test-only; it must not reach into the server's internals beyond its public config types.
#![allow(dead_code, unused_imports)]

pub mod cache;
pub mod config;
pub mod files;
pub mod http;
pub mod metrics;
pub mod origin;
pub mod server;

pub use self::config::*;
pub use self::files::*;
pub use self::http::*;
pub use self::metrics::*;
pub use self::server::*;
