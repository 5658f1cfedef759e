//! The `deltaship` command line: parse, load the config, run, wait for shutdown.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use deltaship::{check, config, pipeline, telemetry};
use tokio_util::sync::CancellationToken;

/// Watches Kubernetes objects like an informer and ships every change as a CloudEvent to
/// Kafka or stdout, in order per object, with sync markers.
#[derive(Parser)]
#[command(version, about, long_about = None)]
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
}

#[derive(clap::Args)]
struct ConfigArg {
    /// Config file (.toml, .yaml or .yml). DELTASHIP_-prefixed variables override it,
    /// `__` separating levels, e.g. DELTASHIP_SINK__BROKERS=host:9092.
    #[arg(long, short, env = "DELTASHIP_CONFIG")]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (Command::Run(arg) | Command::Check(arg) | Command::PrintConfig(arg)) = &cli.command;
    let config = match config::load(&arg.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::PrintConfig(_) => {
            let shown = serde_json::to_string_pretty(&config.masked()).expect("the config serializes");
            println!("{shown}");
            ExitCode::SUCCESS
        }
        Command::Check(_) => {
            let ok = runtime().block_on(check::run(&config));
            if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Command::Run(_) => {
            telemetry::init_logging(config.log.format, &config.log.level);
            match runtime().block_on(pipeline::run(config, CancellationToken::new())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "deltaship failed");
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}
