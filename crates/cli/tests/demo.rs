//! `rollpoint demo`, the main job until the run controller lands: a live
//! tree paused, held unchanged, continued, and checked for lost steps.

use std::process::{Command, Stdio};

use assert_cmd::cargo::cargo_bin;

fn demo(freeze: &str) {
    let out = Command::new(cargo_bin("rollpoint"))
        .args(["demo", "--freeze", freeze, "--hold", "0.3"])
        .stdin(Stdio::null())
        .output()
        .expect("run rollpoint demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no file changed"), "{stdout}");
    assert!(stdout.contains("none lost or repeated"), "{stdout}");
}

#[test]
fn demo_with_sigstop() {
    demo("sigstop");
}

#[test]
fn root_demo_with_the_best_strategy() {
    demo("auto");
}
