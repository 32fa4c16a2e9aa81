//! A real S3-compatible server on loopback for the checkpoint-store tests: `moto`'s server
//! mode (installed by scripts/install-deps), one bucket made with boto3, and an options file
//! (mode 0600) holding its endpoint and credentials the way a user's would.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The secret in every test server's options file: tests assert it reaches no log or file.
pub const SECRET: &str = "rp-test-secret-7f3c91";

/// A moto S3 server with one bucket.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    pub port: u16,
    pub bucket: String,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts the server and makes bucket `rollpoint-test`. Fails loudly when moto is missing.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = crate::free_port();
        let log = dir.path().join("moto.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("python3 -m moto.server: run scripts/install-deps (it installs moto[server])");
        let mut server = Self {
            child,
            port,
            bucket: "rollpoint-test".to_owned(),
            log,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.answers() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "moto's server exited ({status}); is moto[server] installed (scripts/install-deps)?\n{}",
                    server.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "moto's server did not answer: {}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server.make_bucket();
        server
    }

    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .is_err()
        {
            return false;
        }
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf);
        buf.starts_with("HTTP/1.0 200") || buf.starts_with("HTTP/1.1 200")
    }

    fn make_bucket(&self) {
        let script = format!(
            "import boto3\nboto3.client('s3', endpoint_url='{}', aws_access_key_id='rp-test', aws_secret_access_key='{SECRET}', region_name='us-east-1').create_bucket(Bucket='{}')\n",
            self.endpoint(),
            self.bucket
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "making the bucket failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://<bucket>/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// Writes an options file (0600) with the endpoint and credentials into `dir`, and
    /// `extra` lines after them; returns its path.
    pub fn options_file(&self, dir: &Path, extra: &str) -> PathBuf {
        let path = dir.join("store.env");
        std::fs::write(
            &path,
            format!(
                "AWS_ENDPOINT={}\nAWS_ALLOW_HTTP=true\nAWS_REGION=us-east-1\nAWS_ACCESS_KEY_ID=rp-test\nAWS_SECRET_ACCESS_KEY={SECRET}\n{extra}",
                self.endpoint()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    /// Stops the server answering (SIGSTOP): connections are accepted and never answered.
    pub fn freeze(&self) {
        signal(self.child.id(), "STOP");
    }

    /// Lets a frozen server answer again (SIGCONT), its objects intact.
    pub fn thaw(&self) {
        signal(self.child.id(), "CONT");
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A scratch directory that lives as long as the server.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

impl Drop for S3Server {
    fn drop(&mut self) {
        signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
