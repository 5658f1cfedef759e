//! The test tier, the one setting of how big the long tests run: `DELTASHIP_TEST_SCALE` =
//! `proof` (the default: every feature proven, each long test at a size that still fails
//! for the bug it guards) or `soak` (the full sizes: `tests/run --soak`). A test whose size
//! makes it long takes its counts and durations from here, and prints the tier it ran at.

use std::sync::OnceLock;

/// The environment variable that chooses the tier.
pub const VAR: &str = "DELTASHIP_TEST_SCALE";

/// How big the long tests run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Each feature proven at a size that runs in minutes: the default, and `tests/run`'s.
    Proof,
    /// The full sizes, for rare interleavings and slow growth: `tests/run --soak`.
    Soak,
}

impl Tier {
    /// The variable's value for this tier.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Proof => "proof",
            Tier::Soak => "soak",
        }
    }
}

/// The tier of this test process, read from `DELTASHIP_TEST_SCALE` once: unset or `proof` is
/// [`Tier::Proof`], `soak` is [`Tier::Soak`]. Any other value panics, naming the variable and
/// both values, so that a typo never runs a tier nobody asked for.
pub fn tier() -> Tier {
    static TIER: OnceLock<Tier> = OnceLock::new();
    *TIER.get_or_init(|| match std::env::var(VAR) {
        Err(std::env::VarError::NotPresent) => Tier::Proof,
        Ok(value) if value == "proof" => Tier::Proof,
        Ok(value) if value == "soak" => Tier::Soak,
        Ok(value) => panic!("{VAR}={value:?}: set it to `proof` (the default) or `soak`, or leave it unset"),
        Err(e) => panic!("{VAR} is not valid: {e}; set it to `proof` (the default) or `soak`, or leave it unset"),
    })
}

/// Whether this run is the soak tier.
pub fn soak() -> bool {
    tier() == Tier::Soak
}

/// `proof` at the proof tier, `soak` at the soak tier: a test's size in one expression, both
/// values in sight (`by_tier(5, 20)` restarts).
pub fn by_tier<T>(proof: T, soak: T) -> T {
    match tier() {
        Tier::Proof => proof,
        Tier::Soak => soak,
    }
}

/// Prints `SCALE test=<test> tier=<tier> <sizes>` to the test's output, so that what it
/// proved says at which size.
pub fn announce(test: &str, sizes: &str) {
    eprintln!("SCALE test={test} tier={} {sizes}", tier().as_str());
}
