//! The scenario explorer: scenarios drawn from seeds (`Plan::draw` of `tests/support/scenario.rs`), each a
//! configuration (one or two routes on Kafka and JetStream, resyncs off, short or long,
//! object or patch payloads, diff or full relists, Secrets beside ConfigMaps, keyed digests,
//! a label selector, streaming lists, leader election with fencing and one or two replicas,
//! resume on or off) and a schedule of faults (SIGKILL or SIGTERM of the leader, broker
//! restarts, API server restarts, expired watches, compaction, a watched namespace deleted,
//! a stale checkpoint after a SIGKILL) under churn (with large objects or not), run against
//! the real servers until a time budget is spent, and judged by the API server's lists
//! against `deltaship rebuild --verify` and the Python consumer's `--verify`, and the audit
//! of every route's events. Each scenario prints its seed and configuration; a failing one is
//! reproduced with `tests/explore --seed N`, and becomes a named test (see
//! `tests/exactly_once.rs`).
//!
//! `DELTASHIP_TEST_EXPLORE_SECS`: the budget (a scenario started within it runs to its end);
//! by default the tier's (`tests/support/scale.rs`): 180 s at the proof scale, 1,200 s at the
//! soak scale. `DELTASHIP_TEST_EXPLORE_SEED`: run that one seed only.
//! `DELTASHIP_TEST_EXPLORE_LANES`: how many scenarios run at once (default 1). The servers are
//! shared, so a lane's server faults hit the others too: more faults, never fewer promises; a
//! failure found with several lanes is reproduced with its seed alone first.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::scenario::{self, Plan};

/// A line on the process's standard error as it happens, past the test harness's capture
/// (which would show it only on failure): each run's seeds and outcomes are in every log,
/// CI's too.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Runs `seed`'s scenario: its figures, or what broke (a panic, such as a bridge that never
/// became ready, is the scenario's failure, not the batch's end).
async fn explore(seed: u64) -> Result<String, String> {
    let plan = Plan::draw(seed);
    say(&format!("EXPLORE seed={seed} {plan}"));
    let began = Instant::now();
    let outcome = match tokio::spawn(async move { scenario::run(&plan).await }).await {
        Ok(Ok(figures)) => Ok(figures.0),
        Ok(Err(problem)) => Err(problem),
        Err(panicked) => Err(format!("panicked: {panicked}")),
    };
    match &outcome {
        Ok(figures) => say(&format!("EXPLORE seed={seed} ok in {:.0} s: {figures}", began.elapsed().as_secs_f64())),
        Err(problem) => say(&format!("EXPLORE seed={seed} FAILED in {:.0} s: {}", began.elapsed().as_secs_f64(), problem.lines().next().unwrap_or_default())),
    }
    outcome
}

#[tokio::test(flavor = "multi_thread")]
async fn seeded_scenarios_keep_every_promise() {
    let _busy = support::CpuBurner::start();
    let number = |name: &str| std::env::var(name).ok().map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")));
    let only = number("DELTASHIP_TEST_EXPLORE_SEED");
    let budget = Duration::from_secs(number("DELTASHIP_TEST_EXPLORE_SECS").unwrap_or_else(|| support::scale::by_tier(180, 1200)));
    support::scale::announce("seeded_scenarios_keep_every_promise", &format!("budget_secs={}", budget.as_secs()));
    let lanes = if only.is_some() { 1 } else { number("DELTASHIP_TEST_EXPLORE_LANES").unwrap_or(1).max(1) };
    // New seeds each run, printed: the first is the time, the others follow it.
    let first = only.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs());
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(first));
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..lanes {
        let next = next.clone();
        running.spawn(async move {
            let mut ran = Vec::new();
            loop {
                let seed = next.fetch_add(1, Ordering::AcqRel);
                if seed > first && (only.is_some() || started.elapsed() >= budget) {
                    return ran;
                }
                ran.push((seed, explore(seed).await));
            }
        });
    }
    let mut outcomes: Vec<(u64, Result<String, String>)> = Vec::new();
    while let Some(lane) = running.join_next().await {
        outcomes.extend(lane.expect("an explorer lane panicked"));
    }
    outcomes.sort_by_key(|(seed, _)| *seed);
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|(seed, outcome)| outcome.as_ref().err().map(|problem| (seed, problem)))
        .map(|(seed, problem)| {
            format!(
                "seed {seed} ({}): reproduce with `tests/explore --seed {seed}`\n{}",
                Plan::draw(*seed),
                problem.lines().take(40).collect::<Vec<_>>().join("\n")
            )
        })
        .collect();
    let ran = outcomes.len();
    let last = outcomes.last().map_or(first, |(seed, _)| *seed);
    say(&format!("EXPLORE-FIGURES scenarios={ran} seeds={first}..={last} lanes={lanes} failed={} in {:.0} s", failures.len(), started.elapsed().as_secs_f64()));
    assert!(failures.is_empty(), "{} of {ran} scenarios broke a promise:\n\n{}", failures.len(), failures.join("\n\n"));
}
