//! A `nats-server -js` of one test or bench alone: started on a free
//! loopback port with its own store directory, killed on drop. Shared by
//! the e2e tests and the `distributed` bench (`#[path]`-included).

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `nats-server -js`.
pub struct NatsServer {
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    process: Child,
    port: u16,
    extra: Vec<String>,
    store: tempfile::TempDir,
}

/// The `nats-server` binary: Debian's package path, else on `PATH`.
pub fn nats_server_binary() -> Option<PathBuf> {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join("nats-server"))
                    .find(|path| path.is_file())
            })
        })
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

impl NatsServer {
    /// Starts one; panics naming the install command when `nats-server` is
    /// missing, or when it does not listen within 10 s.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`NatsServer::start`] with `extra` server flags (`--user U --pass P`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_on(free_port(), extra)
    }

    /// [`NatsServer::start_with`] on loopback port `port`.
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        let binary = nats_server_binary().unwrap_or_else(|| {
            panic!(
                "nats-server is not installed; distributed runs need it: \
                 apt-get install -y nats-server"
            )
        });
        let store = tempfile::tempdir().expect("temp dir");
        let extra: Vec<String> = extra.iter().map(|flag| (*flag).to_owned()).collect();
        let process = spawn(&binary, port, &store, &extra);
        let server = Self {
            url: format!("nats://127.0.0.1:{port}"),
            process,
            port,
            extra,
            store,
        };
        server.wait_listening();
        server
    }

    #[allow(
        dead_code,
        reason = "the e2e tests restart a server; the bench does not"
    )]
    /// Kills the server (as `kill -9`), keeps it down for `outage`, and
    /// starts it again on the same port with the same store directory, so
    /// that its streams come back; returns once it listens.
    pub fn restart_after(&mut self, outage: Duration) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        std::thread::sleep(outage);
        let binary = nats_server_binary().expect("nats-server ran before");
        self.process = spawn(&binary, self.port, &self.store, &self.extra);
        self.wait_listening();
    }

    #[allow(dead_code, reason = "the e2e tests stop a server; the bench does not")]
    /// Kills the server (as `kill -9`) and leaves it down.
    pub fn kill(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    /// Waits until the server listens, at most 10 s.
    fn wait_listening(&self) {
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nats-server did not listen on port {} within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `nats-server -js` on loopback `port`, its store in `store`.
fn spawn(
    binary: &std::path::Path,
    port: u16,
    store: &tempfile::TempDir,
    extra: &[String],
) -> Child {
    Command::new(binary)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(store.path())
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("start {}: {error}", binary.display()))
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
