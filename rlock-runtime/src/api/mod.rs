//! The façade: what a user calls. The client and its builder, requests and guards, options,
//! the attribute's runtime side (`run`, `scope`), administration, the environment, and the
//! answers a service gives its own clients (HTTP, gRPC). It builds on the lease layer and
//! never reaches below it except to pick a backend.

pub(crate) mod admin;
pub(crate) mod answer;
pub(crate) mod client;
pub(crate) mod duration;
pub(crate) mod env;
pub(crate) mod guard;
pub(crate) mod identity;
pub(crate) mod multi;
pub(crate) mod options;
pub(crate) mod request;
pub(crate) mod run;
pub(crate) mod scope;
pub(crate) mod url;
