//! The test PostgreSQL server (tests/env/postgres) through psql, and the analytics replica
//! (consumers/python/examples/postgres_replica.py, consumers/go/examples/postgres-replica)
//! as a child process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// A database of its own on the test server, for one test; dropped with the value.
pub struct Database {
    pub name: String,
    /// Its libpq URL.
    pub dsn: String,
    server: String,
}

impl Database {
    pub fn create(prefix: &str) -> Database {
        let server = super::var("DELTASHIP_TEST_POSTGRES");
        let name = super::unique(prefix).replace('-', "_");
        psql(&server, &format!("CREATE DATABASE {name}")).unwrap_or_else(|e| panic!("{e}"));
        let (base, _) = server.rsplit_once('/').expect("DELTASHIP_TEST_POSTGRES is a postgresql:// URL with a database");
        Database { dsn: format!("{base}/{name}"), name, server }
    }

    /// The rows `sql` returns, each as its fields (NULL as an empty field); panics with
    /// psql's error.
    pub fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        let out = psql(&self.dsn, sql).unwrap_or_else(|e| panic!("{e}"));
        out.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = psql(&self.server, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

/// Runs `sql` (one or more statements) with psql on `dsn`: its output, unaligned and
/// tab-separated, or the error it printed.
pub fn psql(dsn: &str, sql: &str) -> Result<String, String> {
    let out = Command::new(super::var("DELTASHIP_TEST_PSQL"))
        .args(["--no-psqlrc", "--no-align", "--tuples-only", "--quiet", "--field-separator=\t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql])
        .output()
        .map_err(|e| format!("cannot run psql (DELTASHIP_TEST_PSQL): {e}"))?;
    if !out.status.success() {
        return Err(format!("psql failed ({}) on:\n{sql}\n{}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The replica examples: the same flags, tables and messages, one per language.
#[derive(Clone, Copy, Debug)]
pub enum Language {
    Python,
    Go,
}

impl Language {
    /// The replica's command, before its flags; the Go one built once per test binary.
    fn command(self) -> Command {
        let consumers = Path::new(env!("CARGO_MANIFEST_DIR")).join("consumers");
        match self {
            Language::Python => {
                let mut cmd = Command::new(super::var("DELTASHIP_TEST_PYTHON"));
                cmd.arg(consumers.join("python/examples/postgres_replica.py")).env("PYTHONPATH", consumers.join("python"));
                cmd
            }
            Language::Go => {
                static BUILT: OnceLock<PathBuf> = OnceLock::new();
                Command::new(BUILT.get_or_init(|| {
                    let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("postgres-replica-go");
                    let mut build = Command::new("go");
                    build.args(["build", "-o"]).arg(&bin).arg(".");
                    build.current_dir(consumers.join("go/examples/postgres-replica")).env("GOTOOLCHAIN", "local");
                    super::consumers::run(build, "go build in consumers/go/examples/postgres-replica");
                    bin
                }))
            }
        }
    }
}

/// The replica example following `topic`, writing to `dsn`; its stderr appended to `log`
/// (one file for every run of a test). Killed (SIGKILL) when dropped.
pub struct Replica {
    child: Child,
    pub log: PathBuf,
}

impl Replica {
    pub fn start(language: Language, brokers: &str, topic: &str, dsn: &str, cluster: &str, log: PathBuf) -> Replica {
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("open the replica's log");
        let child = language
            .command()
            .args(["--kafka", brokers, "--topic", topic, "--dsn", dsn, "--cluster", cluster])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start the {language:?} replica: {e}"));
        Replica { child, log }
    }

    /// SIGKILL, and wait for the exit.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it has not exited (a replica exits only on an error).
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}
