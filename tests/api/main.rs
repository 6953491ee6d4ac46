//! The HTTP services from outside (issue 28 point 6: one test program per concern, each
//! module once a program of its own): the inbox and scheduler APIs, hostile clients,
//! throttling, the store's format, the OpenAPI documents, health, metrics, logs, the web
//! pages, payments, the one-account mode and the start of the server.
//!
//! Every module's tests run together on the test harness's threads in this one process: a
//! test may not change what the process shares (environment, working directory).

#[path = "../common/mod.rs"]
mod common;

mod footprint;
mod format;
mod health;
mod hostile;
mod inbox_api;
mod logs;
mod metrics;
mod one_account;
mod openapi;
mod payments;
mod scheduler_api;
mod startup;
mod throttling;
mod web;
