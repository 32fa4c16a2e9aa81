//! The process's own resource use, read from `/proc/self` on each scrape: CPU seconds,
//! resident memory, open file descriptors, threads and start time, under the registry's
//! prefix (`rollpoint_run_process_cpu_seconds_total`, ...). prometheus-client has no
//! process collector of its own, and these five numbers are a few reads of procfs.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

/// Registers the process collector in `registry`.
pub fn register_process(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

#[derive(Debug)]
struct ProcessCollector;

/// One reading of `/proc/self`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessSample {
    pub cpu_seconds: f64,
    pub resident_bytes: i64,
    pub open_fds: i64,
    pub threads: i64,
    pub start_time_seconds: f64,
}

/// Reads the sample; `None` where procfs is not there.
#[must_use]
pub fn sample() -> Option<ProcessSample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    parse(&stat, &status, &boot, open_fds())
}

fn open_fds() -> i64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| i64::try_from(d.count()).unwrap_or(i64::MAX))
}

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ): 100 on every Linux ABI.
const TICKS: f64 = 100.0;

fn parse(stat: &str, status: &str, proc_stat: &str, open_fds: i64) -> Option<ProcessSample> {
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Field numbers of proc(5), less the two before `rest`.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let threads: i64 = f.get(17)?.parse().ok()?;
    let start_ticks: f64 = f.get(19)?.parse().ok()?;
    let rss_kib: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    let btime: f64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())?;
    Some(ProcessSample {
        cpu_seconds: (utime + stime) / TICKS,
        resident_bytes: rss_kib.saturating_mul(1024),
        open_fds,
        threads,
        start_time_seconds: btime + start_ticks / TICKS,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = sample() else { return Ok(()) };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "User and system CPU time of this process",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        for (name, help, unit, value) in [
            (
                "process_resident_memory",
                "Resident memory of this process",
                Some(Unit::Bytes),
                s.resident_bytes,
            ),
            (
                "process_open_fds",
                "Open file descriptors of this process",
                None,
                s.open_fds,
            ),
            (
                "process_threads",
                "Threads of this process",
                None,
                s.threads,
            ),
        ] {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?)?;
        }
        let start = ConstGauge::new(s.start_time_seconds);
        start.encode(encoder.encode_descriptor(
            "process_start_time",
            "Start time of this process since the Unix epoch",
            Some(&Unit::Seconds),
            start.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_in_the_name_parses() {
        let stat =
            "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 0 0";
        let status = "Name:\tx\nVmRSS:\t  2048 kB\n";
        let s = parse(stat, status, "cpu 1 2\nbtime 1700000000\n", 9).unwrap();
        assert!((s.cpu_seconds - 3.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.resident_bytes, 2048 * 1024);
        assert_eq!(s.threads, 7);
        assert_eq!(s.open_fds, 9);
        assert!(
            (s.start_time_seconds - 1_700_000_010.0).abs() < 1e-6,
            "{s:?}"
        );
    }

    #[test]
    fn this_process_is_sampled_and_encoded() {
        let s = sample().unwrap();
        assert!(
            s.resident_bytes > 0 && s.threads >= 1 && s.open_fds >= 1,
            "{s:?}"
        );
        let mut registry = Registry::with_prefix("t");
        register_process(&mut registry);
        let text = crate::metrics::text(&registry);
        for name in [
            "t_process_cpu_seconds_total",
            "t_process_resident_memory_bytes",
            "t_process_open_fds",
            "t_process_threads",
            "t_process_start_time_seconds",
        ] {
            assert!(text.contains(name), "{name} in:\n{text}");
        }
        let parsed =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
        assert!(parsed.samples.len() >= 5, "{text}");
    }
}
