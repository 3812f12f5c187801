//! `ccare-agent` integration tests, one test binary (each link of the whole stack costs
//! disk and minutes on two cores); every module is one area, its doc says which.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod agent_loop;
mod child;
mod crash;
mod credential;
mod external;
mod instructions;
mod plugin_errors;
mod protocol;
mod stream;
mod tools;
mod typed_events;
