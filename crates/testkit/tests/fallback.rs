//! The clients without a supervisor: found by tag and cgroup, paused,
//! continued exactly, and stopped. Bad requests on the socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rollpoint_proto::receipt::Outcome;
use rollpoint_proto::session::FALLBACK_PAUSE_FILE;
use rollpoint_proto::supervisor::{Reply, SUPERVISOR_SOCKET};
use rollpoint_testkit::{
    Supervised, alive, launch_id, lines, per_strategy, receipt, state, wait_for,
};

const LONG: Duration = Duration::from_secs(60);

fn without_supervisor(strategy: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("ticks");
    let fs = f.display().to_string();
    let mut s = Supervised::fake(
        &launch_id("orphaned"),
        &["--freeze", strategy],
        &["flat", "3", "clearenv", "tick", &fs, "20", "100000"],
    );
    wait_for(LONG, "ticks", || (lines(&f) >= 3).then_some(()));
    let tree = s.tree();
    assert!(tree.len() >= 5, "{tree:?}");
    s.child.kill().expect("kill the supervisor");
    s.child.wait().expect("reap the supervisor");

    let opts = ["--freeze", strategy];
    let (code, reply) = s.ask("pause", &opts);
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome), (0, Outcome::Confirmed), "{r:?}");
    assert!(s.session.join(FALLBACK_PAUSE_FILE).exists());
    if strategy == "sigstop" {
        // Found by tag (and, for the child without one, as its descendant).
        for id in &tree {
            assert_eq!(state(*id), Some('T'), "pid {} not stopped", id.pid);
        }
    }
    let held = lines(&f);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(lines(&f), held, "paused launch wrote");

    let (code, reply) = s.ask("continue", &opts);
    assert_eq!(code, 0, "{reply:?}");
    assert!(!s.session.join(FALLBACK_PAUSE_FILE).exists());
    wait_for(LONG, "ticking to resume", || {
        (lines(&f) > held).then_some(())
    });

    let (code, reply) = s.ask("stop", &["--stop-grace", "1"]);
    let r = receipt("stop", &reply);
    assert_eq!((code, r.cleanup_confirmed), (0, Some(true)), "{r:?}");
    assert!(alive(&tree).is_empty(), "left alive: {:?}", alive(&tree));
}
per_strategy!(clients_work_without_a_supervisor, without_supervisor);

#[test]
fn bad_requests_get_a_clear_error_and_the_supervisor_goes_on() {
    let s = Supervised::fake(&launch_id("badreq"), &[], &["sleep", "3600"]);
    for (line, expect) in [
        ("not json\n", "not valid JSON"),
        ("{\"v\":9,\"verb\":\"pause\"}\n", "unknown version 9"),
        ("{\"v\":1,\"verb\":\"explode\"}\n", "verb"),
    ] {
        let mut stream = UnixStream::connect(s.session.join(SUPERVISOR_SOCKET)).expect("connect");
        stream.write_all(line.as_bytes()).expect("write");
        let mut reply = Vec::new();
        BufReader::new(&stream)
            .read_until(b'\n', &mut reply)
            .expect("read");
        let reply = Reply::decode(&reply).expect("a versioned reply");
        let err = reply.error.expect("an error");
        assert!(err.contains(expect), "{line:?} -> {err}");
    }
    let (code, reply) = s.ask("status", &[]);
    assert_eq!(code, 0);
    assert!(
        reply.launch.expect("record").ended.is_none(),
        "still running"
    );
}
