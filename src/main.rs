//! The `deltaship` command line: parse, load the config, run, wait for shutdown.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use deltaship::{check, config, pipeline, telemetry};
use tokio_util::sync::CancellationToken;

/// Exit codes: 0 done, 1 failed (a run that stopped on an error, a check with a failed
/// finding, a rebuild that could not read), 2 a usage error (clap's), 3 `rebuild --verify`
/// read a marker whose count and digest did not match the state rebuilt, 78 an invalid
/// configuration (`EX_CONFIG` of sysexits.h).
const EXIT_CONFIG: u8 = 78;
const EXIT_MISMATCH: u8 = 3;

/// `--version`: the version and the commit it was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("BUILD_REVISION"), ")");

/// Watches Kubernetes objects like an informer and ships every change as a CloudEvent to
/// Kafka, NATS JetStream, HTTP or stdout, in order per object, with sync markers.
#[derive(Parser)]
#[command(version = VERSION, about, long_about = None, after_help = "Exit codes: 0 done, 1 failed, 2 usage error, 78 invalid configuration.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bridge until SIGTERM or SIGINT.
    Run(ConfigArg),
    /// Validate the config, resolve every resource, check list+watch permissions and the
    /// sink; print one line per finding and exit 1 if any failed.
    Check(ConfigArg),
    /// Print the effective configuration (file, then DELTASHIP_ env) as JSON, secrets masked.
    PrintConfig(ConfigArg),
    /// The reference consumer: read a Kafka topic or a JetStream stream from the start,
    /// follow the consumer protocol, write the rebuilt state as JSON and a summary on stderr.
    Rebuild(RebuildArgs),
    /// Print the JSON Schema of the configuration file, for editors and CI checks, e.g.
    /// `deltaship schema > deltaship.schema.json`.
    Schema,
    /// Print a completion script for a shell, e.g. `deltaship completions bash >
    /// /etc/bash_completion.d/deltaship`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["kafka", "nats", "records"])))]
struct RebuildArgs {
    /// Kafka bootstrap servers; read every --topic.
    #[arg(long, requires = "topic")]
    kafka: Option<String>,
    /// Connect with the TLS and credentials of this deltaship config's Kafka sink (TLS,
    /// SASL, librdkafka settings) or NATS sink (auth, TLS), whichever source is read;
    /// secrets from its files or DELTASHIP_ variables, as for `run`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A topic to read (repeat for several).
    #[arg(long)]
    topic: Vec<String>,
    /// NATS server URL; read the --stream.
    #[arg(long, requires = "stream")]
    nats: Option<String>,
    /// The JetStream stream to read.
    #[arg(long)]
    stream: Option<String>,
    /// A recorded stream to read instead: Kafka records or JetStream messages as JSON
    /// lines, e.g. a test vector's kafka.jsonl (vectors/README.md).
    #[arg(long)]
    records: Option<PathBuf>,
    /// Apply only the events of this cluster (the `cluster` extension); needed when
    /// several clusters share the topic or stream.
    #[arg(long)]
    cluster: Option<String>,
    /// Where to write the state document; `-` for stdout.
    #[arg(long, default_value = "-")]
    out: PathBuf,
    /// Stop at the first bad record (exit 1 naming it) instead of skipping and reporting it.
    #[arg(long)]
    strict: bool,
    /// Keep reading after the end: the --out file (required) is rewritten whole as events
    /// change the state, at most once a second, until SIGTERM or SIGINT.
    #[arg(long, conflicts_with = "records")]
    follow: bool,
    /// Exit 3 when a `sync.completed` marker's count and digest did not match the state
    /// rebuilt at it (each mismatch is reported on stderr with or without this flag), after
    /// a last stderr line `verification: {"verified": N, "mismatched": M}`.
    #[arg(long)]
    verify: bool,
}

#[derive(clap::Args)]
struct ConfigArg {
    /// Config file (.toml, .yaml or .yml). DELTASHIP_-prefixed variables override it,
    /// `__` separating levels, e.g. DELTASHIP_SINK__BROKERS=host:9092.
    #[arg(long, short, env = "DELTASHIP_CONFIG")]
    config: PathBuf,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "deltaship", &mut script);
            print_out(&script)
        }
        Command::Schema => print_out(format!("{:#}\n", config::schema()).as_bytes()),
        Command::Rebuild(args) => rebuild(&args),
        Command::PrintConfig(arg) => with_config(&arg, |config| {
            let shown = serde_json::to_string_pretty(&config.masked()).expect("the config serializes");
            print_out(format!("{shown}\n").as_bytes())
        }),
        Command::Check(arg) => {
            with_config(&arg, |config| if runtime(config.runtime.worker_threads).block_on(check::run(&config)) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Run(arg) => with_config(&arg, |config| {
            telemetry::init_logging(config.log.format, &config.log.filter().expect("validated at load"));
            match runtime(config.runtime.worker_threads).block_on(pipeline::run(config, CancellationToken::new())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "deltaship failed");
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }),
    }
}

/// Writes `bytes` to standard output: 0, or 1 naming the error.
fn print_out(bytes: &[u8]) -> ExitCode {
    match write_stdout(bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write to standard output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes and flushes standard output. A reader that closed the pipe early (`| head`) is
/// not an error: the output was wanted only so far.
fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Loads the config (exit 78 with every problem when invalid) and runs `f` with it.
fn with_config(arg: &ConfigArg, f: impl FnOnce(config::Config) -> ExitCode) -> ExitCode {
    match config::load(&arg.config) {
        Ok(c) => f(c),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

fn rebuild(args: &RebuildArgs) -> ExitCode {
    let source = match (&args.records, &args.kafka, &args.nats, &args.stream) {
        (Some(file), ..) => Ok(deltaship::rebuild::Source::Recorded { file: file.clone() }),
        (None, Some(brokers), _, _) => one_sink(args.config.as_deref(), "Kafka", |s| match s {
            config::SinkConfig::Kafka(k) => Some(k),
            _ => None,
        })
        .map(|connection| deltaship::rebuild::Source::Kafka { brokers: brokers.clone(), topics: args.topic.clone(), connection }),
        (None, None, Some(url), Some(stream)) => one_sink(args.config.as_deref(), "NATS", |s| match s {
            config::SinkConfig::Nats(n) => Some(n),
            _ => None,
        })
        .map(|connection| deltaship::rebuild::Source::Nats { url: url.clone(), stream: stream.clone(), connection }),
        _ => unreachable!("clap requires --records, --kafka with --topic or --nats with --stream"),
    };
    let source = match source {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let follow = match (args.follow, args.out.as_os_str() == "-") {
        (false, _) => None,
        (true, true) => {
            eprintln!("error: --follow writes the state to a file: give --out FILE");
            return ExitCode::from(2);
        }
        (true, false) => Some(deltaship::rebuild::Follow { out: args.out.clone(), stop: CancellationToken::new() }),
    };
    let rebuilt = runtime(config::RuntimeConfig::default().worker_threads).block_on(async {
        if let Some(f) = &follow {
            tokio::spawn(cancel_on_signals(f.stop.clone()));
        }
        deltaship::rebuild::rebuild(source, args.cluster.clone(), args.strict, follow).await
    });
    let rebuilt = match rebuilt {
        Ok(rebuilt) => rebuilt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let doc = &rebuilt.document;
    let text = serde_json::to_string_pretty(doc).expect("the state serializes");
    let written = if args.out.as_os_str() == "-" {
        write_stdout(format!("{text}\n").as_bytes())
    } else {
        // Whole or not at all, for a reader of the file (`--follow` rewrites it).
        let tmp = args.out.with_extension("tmp");
        std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &args.out))
    };
    if let Err(e) = written {
        eprintln!("error: cannot write {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    for skipped in &rebuilt.skipped {
        eprintln!("skipped {skipped}");
    }
    eprintln!("{}", doc["summary"]);
    if args.verify {
        eprintln!("verification: {}", serde_json::json!({"verified": rebuilt.verified, "mismatched": rebuilt.mismatched}));
        if rebuilt.mismatched > 0 {
            return ExitCode::from(EXIT_MISMATCH);
        }
    }
    ExitCode::SUCCESS
}

/// Cancels `stop` at the first SIGTERM or SIGINT (`rebuild --follow` stops then).
async fn cancel_on_signals(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        eprintln!("error: cannot listen for SIGTERM and SIGINT; --follow stops only when killed");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    stop.cancel();
}

/// The one sink of the config at `file` that `pick` takes (`sink`, or the only route of
/// that kind, a `what` sink); None without a file.
fn one_sink<T>(file: Option<&Path>, what: &str, pick: impl Fn(config::SinkConfig) -> Option<T>) -> anyhow::Result<Option<T>> {
    let Some(file) = file else { return Ok(None) };
    let c = config::load(file)?;
    let mut sinks: Vec<T> = c.effective_routes().into_iter().filter_map(|r| pick(r.sink)).collect();
    match sinks.len() {
        1 => Ok(Some(sinks.remove(0))),
        n => anyhow::bail!("--config {}: has {n} {what} sinks; rebuild connects with the settings of exactly one: give a config with one", file.display()),
    }
}

/// The runtime of a command, with `worker_threads` (`runtime.worker_threads`; the
/// commands without a config take its default).
fn runtime(worker_threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(worker_threads).enable_all().build().expect("a tokio runtime starts")
}
