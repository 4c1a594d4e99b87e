//! Server tuning (listener, limits, logging), mapped onto the server's config file by
//! `builders::configmap`; defaults are the server's own. API shape only.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Server tuning (maps onto the server's config file).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// HTTP port of the container.
    #[serde(default = "default_http_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// listen(2) backlog (capped by the node's net.core.somaxconn; listen takes an int).
    #[serde(default = "default_backlog")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub backlog: u32,
    /// TCP congestion control of every connection, such as `cubic` or `bbr`; absent = the
    /// node's default (`net.ipv4.tcp_congestion_control`). The pod fails to start when the
    /// node's kernel lacks it or does not allow it without CAP_NET_ADMIN
    /// (`net.ipv4.tcp_allowed_congestion_control`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9_]{1,15}$"))]
    pub congestion_control: Option<String>,
    /// Event-loop workers; 0 = one per CPU the container sees.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1024))]
    pub workers: u32,
    /// Connection and request limits.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// Largest single sendfile/read chunk in bytes.
    #[serde(default = "default_sendfile_max_chunk")]
    #[schemars(range(min = 4096, max = 1073741824))]
    pub sendfile_max_chunk: u64,
    /// One log line per response.
    #[serde(default)]
    pub access_log: bool,
    /// Log format.
    #[serde(default)]
    pub log_format: LogFormatSpec,
    /// The server's `logging.level`: trace, debug, info, warn, error or off, optionally with
    /// comma-separated TARGET=LEVEL directives (`info,content_server::cache=debug`).
    #[serde(default = "default_log_level")]
    pub log_level: String,
    /// Index files tried for directory requests.
    #[serde(default = "default_index")]
    #[schemars(length(max = 16))]
    pub index: Vec<String>,
    /// Seconds in-flight responses may take after SIGTERM (the pod's grace period is longer).
    #[serde(default = "default_shutdown_timeout_secs")]
    #[schemars(range(min = 1, max = 3600))]
    pub shutdown_timeout_secs: u32,
    /// Ranges, ETags, listings, media types and headers by media type.
    #[serde(flatten)]
    pub http: super::ServerHttpSpec,
}

/// Log format.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormatSpec {
    #[default]
    Text,
    Json,
}

/// Connection and request limits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Open client connections per pod.
    #[serde(default = "default_max_connections")]
    #[schemars(range(min = 1))]
    pub max_connections: u32,
    /// Idle keep-alive timeout.
    #[serde(default = "default_keepalive_timeout_secs")]
    #[schemars(range(min = 1, max = 86400))]
    pub keepalive_timeout_secs: u32,
    /// Time to receive a request head.
    #[serde(default = "default_header_read_timeout_secs")]
    #[schemars(range(min = 1, max = 86400))]
    pub header_read_timeout_secs: u32,
    /// Largest request head in bytes.
    #[serde(default = "default_max_header_bytes")]
    #[schemars(range(min = 256, max = 1048576))]
    pub max_header_bytes: u32,
    /// Time a response may wait for the client to accept bytes.
    #[serde(default = "default_send_timeout_secs")]
    #[schemars(range(min = 1, max = 86400))]
    pub send_timeout_secs: u32,
}

fn default_http_port() -> i32 {
    i32::from(content_server::config::Listener::default().port)
}
fn default_backlog() -> u32 {
    content_server::config::Listener::default().backlog
}
fn default_sendfile_max_chunk() -> u64 {
    content_server::config::Limits::default().sendfile_max_chunk as u64
}
fn default_log_level() -> String {
    content_server::config::Logging::default().level
}
fn default_index() -> Vec<String> {
    content_server::config::Http::default().index
}
fn default_shutdown_timeout_secs() -> u32 {
    content_server::config::Config::for_root("/").shutdown_timeout_secs as u32
}
fn default_max_connections() -> u32 {
    content_server::config::Limits::default().max_connections as u32
}
fn default_keepalive_timeout_secs() -> u32 {
    content_server::config::Limits::default().keepalive_timeout_secs as u32
}
fn default_header_read_timeout_secs() -> u32 {
    content_server::config::Limits::default().header_read_timeout_secs as u32
}
fn default_max_header_bytes() -> u32 {
    content_server::config::Limits::default().max_header_bytes as u32
}
fn default_send_timeout_secs() -> u32 {
    content_server::config::Limits::default().send_timeout_secs as u32
}

impl Default for ServerSpec {
    fn default() -> Self {
        ServerSpec {
            port: default_http_port(),
            backlog: default_backlog(),
            congestion_control: None,
            workers: 0,
            limits: LimitsSpec::default(),
            sendfile_max_chunk: default_sendfile_max_chunk(),
            access_log: false,
            log_format: LogFormatSpec::default(),
            log_level: default_log_level(),
            index: default_index(),
            shutdown_timeout_secs: default_shutdown_timeout_secs(),
            http: Default::default(),
        }
    }
}
impl Default for LimitsSpec {
    fn default() -> Self {
        LimitsSpec {
            max_connections: default_max_connections(),
            keepalive_timeout_secs: default_keepalive_timeout_secs(),
            header_read_timeout_secs: default_header_read_timeout_secs(),
            max_header_bytes: default_max_header_bytes(),
            send_timeout_secs: default_send_timeout_secs(),
        }
    }
}
