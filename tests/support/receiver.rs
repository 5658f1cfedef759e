//! ce-receiver (tests/env/cloudevents/receiver): an HTTP receiver built on the official
//! CloudEvents Go SDK that records what it decodes and can be told to fail.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Receiver {
    /// `host:port` it listens on (the same after a restart).
    pub addr: String,
    out: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Receiver {
    /// Starts one on a free port; `args` are its flags (`-token`, `-tls-cert`...).
    pub fn start(args: &[&str]) -> Receiver {
        let out = std::env::temp_dir().join(format!("{}.jsonl", super::unique("ce-receiver")));
        let addr = format!("127.0.0.1:{}", super::bridge::free_port());
        let mut r = Receiver { addr, out, args: args.iter().map(|a| a.to_string()).collect(), child: None };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let bin = super::var("DELTASHIP_TEST_CE_RECEIVER");
        let child = Command::new(bin)
            .args(["-listen", &self.addr, "-out", self.out.to_str().unwrap()])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ce-receiver");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&self.addr).is_err() {
            assert!(Instant::now() < deadline, "ce-receiver does not listen on {} after 20 s", self.addr);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The URL events go to.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}/events", self.addr)
    }

    /// Stops it (what it recorded stays).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same address.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// What the next `count` requests get (`count` -1: until told otherwise), e.g.
    /// `{"mode": "status", "status": 500, "count": 10}`.
    pub fn control(&self, fault: Value) {
        let body = fault.to_string();
        let mut s = TcpStream::connect(&self.addr).expect("connect to ce-receiver");
        write!(s, "POST /_control HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 204"), "ce-receiver refused {body}: {answer}");
    }

    fn lines(&self, kind: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["kind"] == kind).collect()
    }

    /// Every event it accepted, in order: `{"mode": "binary|structured", "event": {...}}`.
    pub fn events(&self) -> Vec<Value> {
        self.lines("event")
    }

    /// Every request it answered, in order: `{"at": nanos, "id": ..., "answer": "200|500|reset|..."}`.
    pub fn attempts(&self) -> Vec<Value> {
        self.lines("attempt")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.out);
    }
}
