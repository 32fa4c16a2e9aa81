//! Exit codes and reaping under the supervisor.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rollpoint_proctree::scan::Table;
use rollpoint_proto::receipt::{Op, Receipt, ReceiptLog};
use rollpoint_proto::session::RECEIPTS_FILE;
use rollpoint_testkit::{Supervised, launch_id, wait_for};

const LONG: Duration = Duration::from_secs(60);

fn receipts(s: &Supervised) -> Vec<Receipt> {
    let bytes = std::fs::read(s.session.join(RECEIPTS_FILE)).expect("receipts log");
    let log = ReceiptLog::decode(&bytes).expect("decode");
    assert_eq!(log.torn_tail, 0, "every receipt is a whole line");
    log.receipts
}

#[test]
fn exit_code_is_the_harness_own() {
    let mut s = Supervised::fake(&launch_id("code"), &[], &["setsid", "exit", "42"]);
    assert_eq!(s.wait(LONG).code(), Some(42));
    let rec = s.record();
    assert_eq!(rec.ended.as_ref().and_then(|e| e.exit_code), Some(42));
    let cleanup = receipts(&s)
        .into_iter()
        .find(|r| r.op == Op::Cleanup)
        .expect("cleanup receipt");
    assert_eq!(cleanup.exit_code, Some(42));
    assert_eq!(cleanup.cleanup_confirmed, Some(true), "{cleanup:?}");
    assert!(
        !cleanup.members.is_empty(),
        "the setsid child was cleaned up: {cleanup:?}"
    );
}

#[test]
fn a_harness_killed_by_a_signal_exits_128_plus_n() {
    let mut s = Supervised::fake(&launch_id("sig"), &[], &["sleep", "3600"]);
    let pid = wait_for(LONG, "the harness pid", || s.record().pid);
    // SAFETY: kill has no memory effects; pid is our harness.
    unsafe { libc::kill(i32::try_from(pid).expect("pid"), libc::SIGKILL) };
    assert_eq!(s.wait(LONG).code(), Some(137));
    let ended = s.record().ended.expect("ended");
    assert_eq!((ended.exit_code, ended.signal), (None, Some(9)));
}

#[test]
fn no_zombie_outlives_a_second_under_the_supervisor() {
    let mut s = Supervised::fake(
        &launch_id("zombies"),
        &[],
        &["abandon", "500", "sleep", "2"],
    );
    let sup = s.child.id();
    let mut first_seen: HashMap<(u32, u64), Instant> = HashMap::new();
    let mut worst = Duration::ZERO;
    let harness = wait_for(LONG, "the harness pid", || s.record().pid);
    let mut orphans: std::collections::HashSet<u32> = std::collections::HashSet::new();
    while s.child.try_wait().expect("try_wait").is_none() {
        let t = Table::scan();
        orphans.extend(t.children(sup).iter().filter(|&&p| p != harness));
        for &pid in t.children(sup) {
            if let Some(st) = t.get(pid)
                && st.state == 'Z'
            {
                let since = *first_seen
                    .entry((pid, st.start_time))
                    .or_insert_with(Instant::now);
                worst = worst.max(since.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.wait(LONG).code(), Some(0));
    assert!(
        worst < Duration::from_secs(1),
        "a zombie lived {worst:?} under the supervisor"
    );
    // The orphans were reparented to the supervisor, so it did the reaping.
    assert!(
        orphans.len() >= 50,
        "only {} orphans seen under the supervisor",
        orphans.len()
    );
}
