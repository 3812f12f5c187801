//! `ccare-session` integration tests, one test binary (each link of the whole stack costs
//! disk and minutes on two cores); every module is one area, its doc says which.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod awaiting;
mod crash;
mod engine;
mod fence;
mod flush;
mod long;
mod prop;
