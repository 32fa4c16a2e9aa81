//! `rollpoint report` of a run with a crash and a resume, opened in headless Chromium
//! (Debian's `chromium`): the page's DOM, as the browser laid it out, holds one bar per
//! launch, the checkpoints and the crash, and its screenshot shows the timeline's colours.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

/// The browser, or a loud failure naming how to install it.
fn chromium() -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        for name in ["chromium", "chromium-browser"] {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("no chromium on PATH: install Debian's chromium package (scripts/install-deps does)");
}

/// Runs headless Chromium on `page` with `args`; returns its stdout.
fn browse(page: &Path, profile: &Path, args: &[&str]) -> String {
    let url = format!("file://{}", page.display());
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chromium");
    let out = std::thread::spawn({
        let mut stdout = child.stdout.take().expect("stdout");
        move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut s).expect("read stdout");
            s
        }
    });
    let end = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait chromium") {
            break s;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            panic!("chromium did not finish on {url} within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(
        status.success(),
        "chromium failed ({status}) on {url}:\n{err}"
    );
    out.join().expect("stdout thread")
}

fn attr(dom: &str, name: &str) -> Option<u64> {
    let at = dom.find(&format!("{name}=\""))? + name.len() + 2;
    dom[at..].split('"').next()?.parse().ok()
}

#[test]
fn root_the_report_of_a_crashed_and_resumed_run_shows_its_timeline_in_chromium() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("p{:04x}", fastrand::u16(..));
    let mut rows: Vec<serde_json::Value> = (0..3)
        .map(|i| command_task(&format!("{tag}c{i}"), 200))
        .collect();
    rows.push(native_task(&format!("{tag}n")));
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    std::fs::write(dir.path().join("model.json"), model_script(300).to_string()).expect("script");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 4\ncheckpoint_every_s = 1\nmodel_script = \"model.json\"\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();

    // A crash after the first checkpoint, then a resume to the end.
    let mut child = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    wait_file(&run_dir.join("checkpoints/LATEST"), LIMIT, &log);
    std::thread::sleep(Duration::from_millis(700));
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("kill the run");
    let _ = wait(&mut child, LIMIT, &log);
    let mut resumed = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    let status = wait(&mut resumed, LIMIT, &log);
    assert!(status.success(), "resume failed ({status}):\n{}", text());

    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 4, "{}", text());
    let launches: usize = results.iter().map(|r| r.launches.len()).sum();

    let page = dir.path().join("report.html");
    let out = Command::new(rollpoint_bin())
        .arg("report")
        .arg(&run_dir)
        .arg("--out")
        .arg(&page)
        .output()
        .expect("rollpoint report");
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&page).expect("page").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the report is mode 0600");
    let html = std::fs::read_to_string(&page).expect("page");
    for loads in ["<link", " src=", "url(", "@import"] {
        assert!(!html.contains(loads), "the page loads nothing ({loads})");
    }

    // The DOM as Chromium laid it out: the script ran and measured the drawn timeline.
    let profile = dir.path().join("chromium");
    let dom = browse(&page, &profile, &["--dump-dom"]);
    let width = attr(&dom, "data-timeline-width").unwrap_or(0);
    assert!(width >= 800, "the timeline was laid out {width} px wide");
    assert_eq!(
        attr(&dom, "data-launch-bars"),
        Some(launches as u64),
        "one bar per launch of the result rows"
    );
    assert!(
        dom.matches("class=\"checkpoint\"").count() >= 1,
        "checkpoints are drawn"
    );
    assert!(
        dom.contains("class=\"resume crash\""),
        "the crash and its resume are drawn"
    );
    assert!(
        dom.contains("data-name=\"crashes survived\"><b>1</b>"),
        "the summary counts the crash"
    );
    assert!(
        dom.contains("class=\"launch resumed\""),
        "a launch that continued a saved session after the crash"
    );
    for r in &results {
        assert!(
            dom.contains(&format!("id=\"rollout-{}\"", r.rollout)),
            "{} has its section",
            r.rollout
        );
    }

    // The screenshot shows the launch bars and the crash line in their colours.
    let shot = dir.path().join("report.png");
    let _ = browse(
        &page,
        &profile,
        &[&format!("--screenshot={}", shot.display())],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("screenshot"),
    ));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("png frame");
    let channels = info.color_type.samples();
    let count = |rgb: [u8; 3]| {
        buf[..info.buffer_size()]
            .chunks(channels)
            .filter(|p| p.len() >= 3 && p[..3] == rgb)
            .count()
    };
    let blue = count([0x2f, 0x7e, 0xd8]);
    let green = count([0x13, 0xa3, 0x6b]);
    let red = count([0xd8, 0x3a, 0x2f]);
    assert!(
        blue + green > 1000,
        "launch bars on screen: {blue} blue and {green} green pixels"
    );
    assert!(red > 50, "the crash line on screen: {red} red pixels");
    if let Ok(keep) = std::env::var("ROLLPOINT_REPORT_SCREENSHOT") {
        std::fs::copy(&shot, keep).expect("keep the screenshot");
    }
}
