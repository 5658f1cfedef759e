//! A nats-server of the test's own (auth, TLS: settings the shared server cannot have),
//! from the binary tests/env built, on a free port with JetStream in a temp store; killed
//! when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NatsServer {
    child: Child,
    pub port: u16,
    /// Holds the config, the JetStream store, the log, and whatever files the test writes.
    pub dir: PathBuf,
    pub log: PathBuf,
}

impl NatsServer {
    /// Starts nats-server with `settings` (e.g. an `authorization { ... }` block) added to
    /// a config that listens on 127.0.0.1 and enables JetStream; waits until it is ready.
    pub fn start(settings: &str) -> NatsServer {
        let bin = std::env::var("DELTASHIP_TEST_NATS_SERVER_BIN").unwrap_or_else(|_| {
            panic!("DELTASHIP_TEST_NATS_SERVER_BIN is not set: start the test servers with `tests/env/up` and `source tests/env/.state/env.sh`, or run the whole suite with `tests/run`")
        });
        let dir = std::env::temp_dir().join(super::unique("nats-server"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = super::bridge::free_port();
        let config = dir.join("nats.conf");
        let store = dir.join("jetstream");
        std::fs::write(&config, format!("listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {store:?} }}\n{settings}\n")).unwrap();
        let log = dir.join("nats-server.log");
        let child = spawn(&bin, &config, &log);
        let mut server = NatsServer { child, port, dir, log };
        server.wait_ready(Duration::from_secs(20));
        server
    }

    /// Kills the server (SIGKILL) and starts it again with the same config, port and
    /// JetStream store; waits until it is ready.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Kills the server (SIGKILL): clients see an outage until `start_again`.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the stopped server again with the same config, port and JetStream store;
    /// waits until it is ready.
    pub fn start_again(&mut self) {
        let bin = std::env::var("DELTASHIP_TEST_NATS_SERVER_BIN").expect("set at start");
        self.child = spawn(&bin, &self.dir.join("nats.conf"), &self.log);
        self.wait_ready(Duration::from_secs(20));
    }

    /// `host:port`, for a `nats://` or `tls://` URL.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Writes a file (a secret, a key) into the server's temp dir; returns its path.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// nats-server logs "Server is ready" once it accepts clients, JetStream included.
    fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log_text().contains("Server is ready") {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("nats-server exited ({status}) before it was ready:\n{}", self.log_text());
            }
            assert!(Instant::now() < deadline, "nats-server not ready within {timeout:?}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// nats-server with `config`, its log (written anew) at `log`.
fn spawn(bin: &str, config: &std::path::Path, log: &std::path::Path) -> Child {
    Command::new(bin)
        .arg("-c")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"))
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Kept after a failure, for its log and config.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
