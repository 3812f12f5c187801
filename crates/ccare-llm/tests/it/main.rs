//! `ccare-llm` integration tests, one test binary (each link of the whole stack costs
//! disk and minutes on two cores); every module is one area, its doc says which.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod adapter;
mod credential;
mod records_prop;
mod script;
mod sse_prop;
