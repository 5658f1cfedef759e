//! The live bench's stage rules (`benches/common/profile.rs`), tested here because the
//! benches run without a test harness.

#[allow(dead_code)]
#[path = "../benches/common/profile.rs"]
mod profile;
