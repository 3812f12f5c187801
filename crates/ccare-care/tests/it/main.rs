//! `ccare-care` integration tests, one test binary (each link of the whole stack costs
//! disk and minutes on two cores); every module is one area, its doc says which.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod acceptance;
mod action_line;
mod budget;
mod categories;
mod config;
mod controls_catalog;
mod hysteresis;
mod journal;
mod journal_failure;
mod metrics;
mod notice;
mod overflow;
mod passes;
mod plugin;
mod pricing;
mod quiet_start;
mod repair;
mod rest;
mod rig;
mod simulation;
mod status;
mod summary_route;
mod summary_side;
mod tone;
mod typed_events;
mod undo;
