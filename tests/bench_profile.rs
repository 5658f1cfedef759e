//! The benches' stage rules (`benches/common/profile.rs`), tested here because the
//! benches run without a test harness.

#[path = "../benches/common/profile.rs"]
mod profile;

use profile::{CLIENT_THREADS, shares, stage_of};

#[test]
fn a_sample_is_charged_to_its_innermost_named_stage() {
    // The allocator and the kernel count for their caller; the sink's send inside the
    // dispatcher is the sink's; the Kafka client inside the sink is the client's.
    let frames = [
        "_int_malloc",
        "malloc",
        "<deltaship::sink::Sink as deltaship::sink::Publisher>::send::{{closure}}",
        "deltaship::pipeline::dispatch::Dispatcher<P>::run",
        "tokio::runtime::task::core::Core<T,S>::poll",
    ];
    assert_eq!(stage_of("tokio-rt-worker", &frames), "the sink (records and headers)");
    let frames = ["__GI___libc_write", "rd_kafka_producev", "deltaship::sink::kafka::producer::KafkaSink::produce"];
    assert_eq!(stage_of("tokio-rt-worker", &frames), "the Kafka client (called by the program)");
    assert_eq!(stage_of("rdk:broker1", &["deltaship::sink::x"]), CLIENT_THREADS);
    assert_eq!(
        stage_of("tokio-rt-worker", &["epoll_wait", "mio::poll::Poll::poll", "tokio::runtime::io::driver::Driver::turn"]),
        "the runtime (scheduling, timers, I/O readiness)"
    );
    assert_eq!(stage_of("tokio-rt-worker", &["_start"]), "other");
}

#[test]
fn perf_script_output_is_split_into_samples() {
    let script = "tokio-rt-worker \n\t a40950 <core::hash::sip::Hasher<S> as core::hash::Hasher>::write\n\t cd7240 deltaship::telemetry::meters::dispatch::DispatchMeters::acknowledged\n\nrdk:broker1 \n\t 10ac4d __libc_sendmsg\n\n";
    let (shares, samples) = shares(script);
    assert_eq!(samples, 2);
    assert_eq!(shares.get("metrics"), Some(&0.5));
    assert_eq!(shares.get(CLIENT_THREADS), Some(&0.5));
}
