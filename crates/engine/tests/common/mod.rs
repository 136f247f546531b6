//! Shared test support lives in `lockstep-testkit`, so every backend is held to the same checks.
#![allow(unused_imports)]

pub use lockstep_testkit::*;
