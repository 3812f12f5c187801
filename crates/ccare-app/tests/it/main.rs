//! `ccare-app` integration tests, one test binary; every module is one area, its doc
//! says which.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod agents;
mod boot;
mod config;
mod config_props;
mod durability;
mod lease;
mod profiles;
