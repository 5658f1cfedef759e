//! The scenario explorer: scenarios drawn from seeds (`Plan::draw` of `tests/support/scenario.rs`), each a
//! configuration (one or two routes on Kafka and JetStream, resyncs off, short or long,
//! object or patch payloads, diff or full relists, Secrets beside ConfigMaps, keyed digests,
//! streaming lists, leader election with fencing and one or two replicas, resume on or off)
//! and a schedule of faults (SIGKILL or SIGTERM of the leader, broker restarts, API server
//! restarts, expired watches, compaction) under churn, run against the real
//! servers until a time budget is spent, and judged by the API server's lists against
//! `deltaship rebuild --verify` and the audit of every route's events. Each scenario prints
//! its seed and configuration; a failing one is reproduced with `tests/explore --seed N`, and
//! becomes a named test (see `tests/exactly_once.rs`).
//!
//! `DELTASHIP_TEST_EXPLORE_SECS`: the budget (default 180 s, as in tests/run; a scenario started within it
//! runs to its end). `DELTASHIP_TEST_EXPLORE_SEED`: run that one seed only.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::scenario::{self, Plan};

#[tokio::test(flavor = "multi_thread")]
async fn seeded_scenarios_keep_every_promise() {
    let _busy = support::CpuBurner::start();
    let number = |name: &str| std::env::var(name).ok().map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")));
    let only = number("DELTASHIP_TEST_EXPLORE_SEED");
    let budget = Duration::from_secs(number("DELTASHIP_TEST_EXPLORE_SECS").unwrap_or(180));
    // New seeds each run, printed: the first is the time, the others follow it.
    let first = only.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs());
    let started = Instant::now();
    let (mut ran, mut failures) = (0, Vec::new());
    for seed in first.. {
        if ran > 0 && (only.is_some() || started.elapsed() >= budget) {
            break;
        }
        let plan = Plan::draw(seed);
        eprintln!("EXPLORE seed={seed} {plan}");
        let began = Instant::now();
        // A panic in a scenario (a bridge that never became ready) is its failure, not the
        // batch's end.
        let run = {
            let plan = plan.clone();
            tokio::spawn(async move { scenario::run(&plan).await })
        };
        let outcome = match run.await {
            Ok(Ok(figures)) => Ok(figures.0),
            Ok(Err(problem)) => Err(problem),
            Err(panicked) => Err(format!("panicked: {panicked}")),
        };
        ran += 1;
        match outcome {
            Ok(figures) => eprintln!("EXPLORE seed={seed} ok in {:.0} s: {figures}", began.elapsed().as_secs_f64()),
            Err(problem) => {
                eprintln!("EXPLORE seed={seed} FAILED in {:.0} s: {problem}", began.elapsed().as_secs_f64());
                failures.push(format!(
                    "seed {seed} ({plan}): reproduce with `tests/explore --seed {seed}`\n{}",
                    problem.lines().take(40).collect::<Vec<_>>().join("\n")
                ));
            }
        }
    }
    eprintln!("EXPLORE-FIGURES scenarios={ran} seeds={first}..={} failed={} in {:.0} s", first + ran - 1, failures.len(), started.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "{} of {ran} scenarios broke a promise:\n\n{}", failures.len(), failures.join("\n\n"));
}
