//! `ccare` integration tests, one test binary (each link of the whole stack costs
//! disk and minutes on two cores); every module is one area, its doc says which.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod boot;
mod care;
mod chat;
mod chat_recovery;
mod cli;
mod context_read;
mod context_undo;
mod external_tools;
mod lease;
mod run;
mod serve;
mod time_context;
mod watch;
