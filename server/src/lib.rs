//! content-server: a static file server and caching node built around an event loop plus one
//! bounded thread pool per volume. See ARCHITECTURE.md for the path of a request through these
//! modules.
//!
//! Layers, from the top (the table in [`layers`], checked by its tests): [`cli`] -> [`runtime`] ->
//! [`accept`] -> [`conn`] -> [`serve`] (and [`idle`], the parked connections, handed back to
//! `conn` through a function runtime gives it) -> [`shared`] (what connections share) ->
//! [`admin`] -> [`cache`] -> [`volume`] -> [`origin`], [`pool`], [`resolve`], [`logging`] ->
//! [`fs`], [`http`] -> [`config`], [`lifecycle`], [`metrics`], [`socket`] (the leaves). A module
//! imports only from layers below it, never from one above (no import cycles).

pub mod accept;
pub mod admin;
pub mod bind;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod config;
pub mod conn;
pub mod descriptors;
pub mod fs;
pub mod http;
pub mod idle;
pub mod layers;
pub mod lifecycle;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod origin;
pub mod pool;
pub mod resolve;
pub mod runtime;
pub mod serve;
pub mod shared;
pub mod socket;
pub mod volume;
