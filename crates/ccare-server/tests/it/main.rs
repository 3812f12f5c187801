//! The server's integration tests: real HTTP over loopback with a real client; one
//! test binary, one module per area (its doc says which). `rig` is the shared server
//! fixture every module uses.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod api_input;
mod events;
mod fuzzed;
mod gateway;
mod gateway_clients;
mod gateway_input;
mod gateway_keys;
mod gateway_watch;
mod host;
mod load;
mod management;
mod rig;
mod series;
mod sessions;
mod ui;
mod ui_more;
mod undo;
