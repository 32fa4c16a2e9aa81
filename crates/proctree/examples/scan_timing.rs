//! Prints how long a /proc listing, a full stat scan and a membership pass
//! take on this machine, for a tree rooted at the given pid.
use std::time::Instant;

use rollpoint_proctree::MemberSpec;
use rollpoint_proctree::members::Membership;
use rollpoint_proctree::scan::{Table, read_stat};

fn main() {
    let root: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let mut m = Membership::new(MemberSpec {
        roots: vec![root],
        include_roots: true,
        ..Default::default()
    });
    for _ in 0..3 {
        let t = Instant::now();
        let pids: Vec<u32> = std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let list = t.elapsed();
        let t = Instant::now();
        let n = pids.iter().filter(|&&p| read_stat(p).is_some()).count();
        let stats = t.elapsed();
        let t = Instant::now();
        let table = Table::scan();
        let scan = t.elapsed();
        let t = Instant::now();
        let members = m.find(&table).len();
        println!(
            "list {list:?}, {n} stats {stats:?}, scan {scan:?}, find {:?} ({members} members)",
            t.elapsed()
        );
    }
}
