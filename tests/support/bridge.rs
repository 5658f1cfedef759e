//! The deltaship binary as a child process, as users run it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct Bridge {
    child: Child,
    pub http: String,
    pub config: PathBuf,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub log: PathBuf,
    /// The thread that copies stdout into `stdout`, until the process closes it.
    reader: Option<JoinHandle<()>>,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET `path` of the HTTP server at `addr` (`host:port`): (status, body); None when
/// nothing answers.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(super::unique("deltaship-it"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The variable that makes tests regenerate the files they check (`DELTASHIP_BLESS=1`);
/// never passed on to deltaship, which would read it as configuration.
pub const BLESS: &str = "DELTASHIP_BLESS";

/// The exit code of an invalid configuration (README "Commands").
pub const EXIT_CONFIG: i32 = 78;

/// Runs a deltaship subcommand to completion: (exit status, stdout, stderr).
pub fn command(args: &[&str], config_toml: &str, envs: &[(&str, &str)]) -> (ExitStatus, String, String) {
    let path = scratch_dir().join("config.toml");
    std::fs::write(&path, config_toml).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_deltaship"))
        .args(args)
        .arg("--config")
        .arg(&path)
        .env_remove(BLESS)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run deltaship");
    let out = output_within(child, Duration::from_secs(300), &format!("deltaship {}", args.join(" ")));
    (out.status, String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The output of `child` (stdout and stderr piped) once it ends. One still running after
/// `timeout` is killed and fails the test with what it wrote, so a hang costs minutes, not
/// the whole suite's time.
pub fn output_within(child: Child, timeout: Duration, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = rx.recv_timeout(timeout).unwrap_or_else(|_| {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        let out = rx.recv().expect("the waiting thread answers").expect("read the child's output");
        panic!("{what}: still running after {timeout:?}, killed; it wrote:\n{}", String::from_utf8_lossy(&out.stderr))
    });
    out.expect("read the child's output")
}

/// Runs `deltaship run` with `config_toml` until it exits by itself (a start-up failure),
/// its HTTP server on a free port: (exit status, stdout, stderr). A run still going after
/// `timeout` fails the test with its log (`command` would hang it).
pub fn run_to_exit(config_toml: &str, timeout: Duration) -> (ExitStatus, String, String) {
    let mut bridge = Bridge::start(config_toml);
    let status = bridge.wait_exit(timeout);
    // The process is gone, so its stdout is closed: the reader has read everything once it ends.
    if let Some(reader) = bridge.reader.take() {
        reader.join().expect("the stdout reader panicked");
    }
    (status, bridge.lines().join("\n"), bridge.log_text())
}

impl Bridge {
    /// Starts `deltaship run` with `config_toml` (e.g. `TestConfig::toml`), its HTTP server
    /// on a free port.
    pub fn start(config_toml: &str) -> Bridge {
        Bridge::start_with_env(config_toml, &[])
    }

    /// `start`, with extra environment variables (e.g. a secret as a `DELTASHIP_` override).
    pub fn start_with_env(config_toml: &str, envs: &[(&str, &str)]) -> Bridge {
        let config = scratch_dir().join("config.toml");
        std::fs::write(&config, config_toml).unwrap();
        Bridge::start_file(&config, envs)
    }

    /// Starts `deltaship run` with the config file at `config` as it is (TOML or YAML), its
    /// HTTP server moved to a free port by `DELTASHIP_HTTP__LISTEN`.
    pub fn start_file(config: &Path, envs: &[(&str, &str)]) -> Bridge {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut all = vec![("DELTASHIP_HTTP__LISTEN", listen.as_str())];
        all.extend_from_slice(envs);
        Bridge::spawn(config.to_path_buf(), port, &all)
    }

    fn spawn(config: PathBuf, port: u16, envs: &[(&str, &str)]) -> Bridge {
        let log = scratch_dir().join("deltaship.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_deltaship"))
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "deltaship=debug,info")
            // The tests' own switch (regenerate committed files), not configuration.
            .env_remove(BLESS)
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start deltaship");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let lines = stdout.clone();
        let pipe = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Bridge { child, http: format!("127.0.0.1:{port}"), config, stdout, log, reader: Some(reader) }
    }

    /// Whether the process has not exited yet.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The process id of the running bridge (for /proc/<pid>/status).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET a path of the HTTP server: (status, body); None when nothing answers.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&self.http, path)
    }

    /// Waits until /readyz answers 200; panics with the log if the process exits or the
    /// timeout passes.
    pub fn wait_ready(&mut self, timeout: Duration) {
        self.wait_until(timeout, "ready", Bridge::ready);
    }

    /// `wait_ready`, and leading (with leader election a standby is ready too).
    pub fn wait_leading(&mut self, timeout: Duration) {
        self.wait_until(timeout, "leading and ready", |b| b.leads() && b.ready());
    }

    fn wait_until(&mut self, timeout: Duration, what: &str, done: impl Fn(&Bridge) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("deltaship exited ({status}) before it was {what}:\n{}", self.log_text());
            }
            if done(self) {
                return;
            }
            assert!(Instant::now() < deadline, "deltaship not {what} within {timeout:?}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn ready(&self) -> bool {
        matches!(self.get("/readyz"), Some((200, _)))
    }

    /// Whether this bridge holds the leader election Lease (`deltaship_leader 1`).
    pub fn leads(&self) -> bool {
        self.get("/metrics").is_some_and(|(_, m)| m.lines().any(|l| l == "deltaship_leader 1"))
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(ok.success(), "kill -{signal} failed");
    }

    /// SIGTERM, then wait for the exit (at most `timeout`).
    pub fn stop(mut self, timeout: Duration) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit(timeout)
    }

    /// Waits until the process exits (at most `timeout`: a start-up failure must not hang).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "deltaship did not exit within {timeout:?}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The stdout lines written so far.
    pub fn lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
