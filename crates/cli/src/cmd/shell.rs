//! `rollpoint shell RUN_DIR ROLLOUT [--while-frozen] [-- CMD...]`: a terminal in a live
//! rollout's sandbox (a shell by default), over the run's control endpoint's WebSocket. This
//! terminal is put in raw mode while it lasts, so keys go to the sandbox as typed; the exit
//! code is the command's.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::TcpStream;
use std::os::fd::AsFd as _;

use anyhow::{Context as _, bail};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};
use tungstenite::{Message, WebSocket};

#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    #[command(flatten)]
    pub target: super::exec::Target,
    /// The command (default /bin/sh).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Puts the terminal back as it was when dropped.
struct Raw(Option<Termios>);

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, t);
        }
    }
}

pub fn run(args: &ShellArgs) -> anyhow::Result<()> {
    let t = &args.target;
    rollpoint_proto::key::RolloutId::new(&t.rollout)
        .map_err(|e| anyhow::anyhow!("rollout: {e}"))?;
    let token = super::locate::token(&t.control_token_file)?;
    let addr = super::exec::endpoint(&t.run_dir)?;
    let (rows, cols) = size();
    let mut query = format!("rows={rows}&cols={cols}");
    if t.while_frozen {
        query.push_str("&while_frozen=true");
    }
    if !args.command.is_empty() {
        query.push_str("&cmd=");
        query.push_str(&encode(&serde_json::to_string(&args.command)?));
    }
    let url = format!("ws://{addr}/v1/rollouts/{}/shell?{query}", t.rollout);
    let request = tungstenite::http::Request::builder()
        .uri(&url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Host", addr.to_string())
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header(
            "Sec-WebSocket-Key",
            tungstenite::handshake::client::generate_key(),
        )
        .body(())
        .context("the shell request")?;
    let stream = TcpStream::connect(addr)
        .with_context(|| format!("{addr}: the run's control endpoint did not answer"))?;
    let (mut ws, _) = match tungstenite::client(request, stream) {
        Ok(done) => done,
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(reply))) => {
            let body = reply
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .and_then(|m| m.as_str())
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| body.into_owned());
            bail!("{url} ({}): {message}", reply.status());
        }
        Err(e) => bail!("{url}: {e}"),
    };
    ws.get_mut().set_nonblocking(true)?;
    let stdin = std::io::stdin();
    let raw = Raw(tcgetattr(stdin.as_fd()).ok().inspect(|saved| {
        let mut t = saved.clone();
        cfmakeraw(&mut t);
        let _ = tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &t);
    }));
    let code = relay(&mut ws)?;
    drop(raw);
    std::process::exit(code);
}

/// Copies stdin to the socket and the socket to stdout until the command's end is said.
fn relay(ws: &mut WebSocket<TcpStream>) -> anyhow::Result<i32> {
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut stdin_open = true;
    let mut buf = [0_u8; 8192];
    loop {
        // Everything the socket already holds first.
        loop {
            match ws.read() {
                Ok(Message::Binary(bytes)) => {
                    stdout.write_all(&bytes)?;
                    stdout.flush()?;
                }
                Ok(Message::Text(text)) => {
                    let end: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                    if let Some(e) = end.get("error").and_then(|e| e.as_str()) {
                        bail!("the shell failed: {e}");
                    }
                    let code = end
                        .get("exit_code")
                        .and_then(serde_json::Value::as_i64)
                        .or_else(|| {
                            end.get("signal")
                                .and_then(serde_json::Value::as_i64)
                                .map(|s| 128 + s)
                        })
                        .unwrap_or(1);
                    return Ok(i32::try_from(code).unwrap_or(1));
                }
                Ok(Message::Close(_)) => return Ok(1),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => break,
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Ok(1);
                }
                Err(e) => bail!("the shell's connection failed: {e}"),
            }
        }
        let mut fds = vec![PollFd::new(ws.get_ref().as_fd(), PollFlags::POLLIN)];
        let stdin_fd = std::io::stdin();
        if stdin_open {
            fds.push(PollFd::new(stdin_fd.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(500_u16)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => bail!("poll: {e}"),
        }
        let ready = fds
            .get(1)
            .and_then(PollFd::revents)
            .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP));
        if stdin_open && ready {
            let n = stdin.read(&mut buf)?;
            if n == 0 {
                // Input ended: the terminal's end-of-file, so the command sees it too.
                stdin_open = false;
                send(ws, Message::Binary(vec![4].into()))?;
            } else {
                send(ws, Message::Binary(buf[..n].to_vec().into()))?;
            }
        }
    }
}

fn send(ws: &mut WebSocket<TcpStream>, msg: Message) -> anyhow::Result<()> {
    let mut pending = Some(msg);
    loop {
        let step = match pending.take() {
            Some(m) => ws.send(m),
            None => ws.flush(),
        };
        match step {
            Ok(()) => return Ok(()),
            Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => bail!("the shell's connection failed: {e}"),
        }
    }
}

/// The terminal's rows and columns from `LINES` and `COLUMNS` (24 x 80 when they are not
/// set); the size is fixed when the shell opens.
fn size() -> (u16, u16) {
    let from_env = |k: &str, d: u16| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse::<u16>().ok())
            .filter(|v| (1..=1000).contains(v))
            .unwrap_or(d)
    };
    (from_env("LINES", 24), from_env("COLUMNS", 80))
}

/// `s` percent-encoded for a query.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
