//! `rollpoint report RUN_DIR`: one self-contained HTML page of a run, read from disk only:
//! the summary (tasks, verified, rewards, tokens, checkpoints, crashes survived), a timeline
//! per rollout (its launches, every checkpoint, every resume), the checkpoint durations over
//! time, and per rollout its launch log and transcript.
//!
//! The page needs no network: styles and the SVG drawings are inline, and the one script
//! only records the drawn timeline's size on `<body>` (`data-timeline-width`), so a headless
//! browser can say the timeline was laid out. Every text of the run is HTML-escaped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rollpoint_driver::{RolloutResult, Status};

use crate::errors::RunError;
use crate::events::{Event, EventLine, read_events};
use crate::results::read_results;
use crate::status::read_status;

/// The default file name under the run directory.
pub const REPORT_FILE: &str = "report.html";

/// What the report shows, read from the run directory.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub run_dir: PathBuf,
    pub tasks: usize,
    pub rows: Vec<RolloutResult>,
    pub events: Vec<EventLine>,
    /// Event lines that could not be read.
    pub skipped_events: usize,
    /// Rollouts without a row, with the attempt last dispatched.
    pub unfinished: Vec<(String, u32)>,
    /// Rollouts whose sandboxes were trusted.
    pub trusted: Vec<String>,
}

/// Totals of the summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub verified: usize,
    /// Rows the infrastructure ended, by class.
    pub infra_errors: std::collections::BTreeMap<&'static str, usize>,
    pub reward_sum: f64,
    pub rewarded: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub model_calls: u64,
    pub launches: usize,
    pub checkpoints: usize,
    pub checkpoints_failed: usize,
    /// Fleet pauses for a weight update.
    pub fleet_pauses: usize,
    pub resumes: usize,
    /// Resumes not preceded by a stop: the runner had crashed.
    pub crashes: usize,
}

impl RunReport {
    /// Reads the report of `run_dir`.
    pub fn read(run_dir: &Path) -> Result<Self, RunError> {
        let status = read_status(run_dir)?;
        let rows = read_results(run_dir)?;
        let events = read_events(run_dir)?;
        Ok(Self {
            run_dir: run_dir.to_path_buf(),
            tasks: status.tasks,
            rows,
            events: events.lines,
            skipped_events: events.skipped,
            unfinished: status.unfinished,
            trusted: status.trusted,
        })
    }

    /// The summary's totals.
    #[must_use]
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for r in &self.rows {
            match r.status {
                Status::Verified => s.verified += 1,
                Status::InfraError => {
                    let class = r.infra_class.map_or("unclassified", |c| c.as_str());
                    *s.infra_errors.entry(class).or_default() += 1;
                }
                Status::Unverified | Status::Cancelled => {}
            }
            if let Some(x) = r.reward {
                s.reward_sum += x;
                s.rewarded += 1;
            }
            if let Some(u) = &r.usage {
                s.prompt_tokens += u.prompt_tokens;
                s.completion_tokens += u.completion_tokens;
                s.model_calls += u.model_calls;
            }
            s.launches += r.launches.len();
        }
        let mut stopped = false;
        for e in &self.events {
            match &e.event {
                Event::Checkpoint { .. } => s.checkpoints += 1,
                Event::CheckpointFailed { .. } => s.checkpoints_failed += 1,
                Event::Stopped { .. } => stopped = true,
                Event::Resumed { .. } => {
                    s.resumes += 1;
                    if !stopped {
                        s.crashes += 1;
                    }
                    stopped = false;
                }
                Event::FleetPaused { .. } => s.fleet_pauses += 1,
                Event::Started { .. }
                | Event::Finished { .. }
                | Event::Forked { .. }
                | Event::InfraRetry { .. }
                | Event::FleetContinued { .. } => {}
            }
        }
        s
    }

    /// The page.
    #[must_use]
    pub fn html(&self) -> String {
        let mut page = String::with_capacity(64 * 1024);
        let title = format!("rollpoint run {}", self.run_dir.display());
        let _ = write!(
            page,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
            esc(&title),
            esc(&title)
        );
        if !self.trusted.is_empty() {
            let _ = writeln!(
                page,
                "<p class=\"warn\"><b>Trusted sandboxes:</b> {} rollouts ran their code as the \
                 host's root (sandbox.isolation = \"trusted\"): {}</p>",
                self.trusted.len(),
                esc(&self.trusted.join(", "))
            );
        }
        self.summary_html(&mut page);
        page.push_str("<h2>Timeline</h2>\n");
        self.timeline_svg(&mut page);
        page.push_str("<h2>Checkpoint durations</h2>\n");
        self.durations_svg(&mut page);
        page.push_str("<h2>Rollouts</h2>\n");
        for r in &self.rows {
            rollout_html(&mut page, r);
        }
        if !self.unfinished.is_empty() {
            page.push_str("<h3>Not finished</h3><ul>");
            for (rollout, attempt) in &self.unfinished {
                let _ = write!(page, "<li>{} (attempt {attempt})</li>", esc(rollout));
            }
            page.push_str("</ul>\n");
        }
        let _ = write!(page, "<script>{SCRIPT}</script>\n</body></html>\n");
        page
    }

    fn summary_html(&self, page: &mut String) {
        let s = self.summary();
        #[expect(clippy::cast_precision_loss, reason = "a count of rows")]
        let mean = if s.rewarded == 0 {
            "-".to_owned()
        } else {
            format!("{:.3}", s.reward_sum / s.rewarded as f64)
        };
        page.push_str("<div id=\"summary\" class=\"cards\">");
        for (label, value) in [
            ("tasks", self.tasks.to_string()),
            ("finished", self.rows.len().to_string()),
            ("verified", s.verified.to_string()),
            (
                "infra errors",
                s.infra_errors.values().sum::<usize>().to_string(),
            ),
            ("mean reward", mean),
            ("model calls", s.model_calls.to_string()),
            ("prompt tokens", s.prompt_tokens.to_string()),
            ("completion tokens", s.completion_tokens.to_string()),
            ("launches", s.launches.to_string()),
            ("checkpoints", s.checkpoints.to_string()),
            ("failed checkpoints", s.checkpoints_failed.to_string()),
            ("weight updates", s.fleet_pauses.to_string()),
            ("crashes survived", s.crashes.to_string()),
        ] {
            let _ = write!(
                page,
                "<div class=\"card\" data-name=\"{}\"><b>{}</b><span>{}</span></div>",
                esc(label),
                esc(&value),
                esc(label)
            );
        }
        page.push_str("</div>\n");
        if !s.infra_errors.is_empty() {
            page.push_str("<p id=\"infra\">Ended by the infrastructure (no reward): ");
            let parts: Vec<String> = s
                .infra_errors
                .iter()
                .map(|(class, n)| format!("{} {n}", esc(class)))
                .collect();
            page.push_str(&parts.join(", "));
            page.push_str("</p>\n");
        }
        self.groups_html(page);
        if self.skipped_events > 0 {
            let _ = writeln!(
                page,
                "<p class=\"warn\">{} lines of events.jsonl could not be read.</p>",
                self.skipped_events
            );
        }
    }

    /// Groups of samples: pass@1 and pass@k per task and overall.
    fn groups_html(&self, page: &mut String) {
        let groups = crate::groups::groups(&self.rows);
        let Some(k) = groups.iter().map(|g| g.samples).filter(|n| *n > 0).min() else {
            return;
        };
        let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
        let _ = write!(
            page,
            "<h2>Groups</h2>\n<table id=\"groups\" data-k=\"{k}\"><tr><th>group</th><th>samples</th>\
             <th>passed</th><th>infra errors</th><th>pass@1</th><th>pass@{k}</th></tr>"
        );
        for g in &groups {
            let _ = write!(
                page,
                "<tr data-group=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td class=\"p1\">{}</td><td class=\"pk\">{}</td></tr>",
                esc(&g.id),
                esc(&g.id),
                g.samples,
                g.passed,
                g.infra_errors,
                fmt(crate::groups::pass_at_k(g.samples, g.passed, 1)),
                fmt(crate::groups::pass_at_k(g.samples, g.passed, k)),
            );
        }
        let overall = |k| crate::groups::mean_pass_at_k(&groups, k).map(|(v, _)| v);
        let _ = writeln!(
            page,
            "<tr id=\"overall\"><td>all</td><td></td><td></td><td></td><td class=\"p1\">{}</td>\
             <td class=\"pk\">{}</td></tr></table>",
            fmt(overall(1)),
            fmt(overall(k)),
        );
    }

    /// The time span the drawings cover, Unix ms.
    fn span(&self) -> (u64, u64) {
        let starts = self
            .rows
            .iter()
            .flat_map(|r| r.launches.iter().map(|l| l.started_at_ms))
            .chain(self.events.iter().map(|e| e.at_ms));
        let ends = self
            .rows
            .iter()
            .flat_map(|r| r.launches.iter().filter_map(|l| l.ended_at_ms))
            .chain(self.events.iter().map(|e| e.at_ms));
        let t0 = starts.min().unwrap_or(0);
        let t1 = ends.max().unwrap_or(t0).max(t0 + 1);
        (t0, t1)
    }

    fn timeline_svg(&self, page: &mut String) {
        const LEFT: f64 = 170.0;
        const WIDTH: f64 = 900.0;
        const ROW: f64 = 22.0;
        const TOP: f64 = 24.0;
        let (t0, t1) = self.span();
        #[expect(clippy::cast_precision_loss, reason = "milliseconds of a run")]
        let x = |t: u64| LEFT + (t.saturating_sub(t0)) as f64 / (t1 - t0) as f64 * WIDTH;
        #[expect(clippy::cast_precision_loss, reason = "a count of rows")]
        let height = TOP + ROW * self.rows.len().max(1) as f64 + 10.0;
        let _ = write!(
            page,
            "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" \
             viewBox=\"0 0 {} {height}\">",
            LEFT + WIDTH + 20.0,
            LEFT + WIDTH + 20.0
        );
        // Seconds along the top.
        let total_s = (t1 - t0) / 1000;
        let step = [1u64, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]
            .into_iter()
            .find(|s| total_s / s <= 10)
            .unwrap_or(7200);
        let mut s = 0;
        while s <= total_s {
            let tx = x(t0 + s * 1000);
            let _ = write!(
                page,
                "<line class=\"tick\" x1=\"{tx:.1}\" x2=\"{tx:.1}\" y1=\"{}\" y2=\"{height}\"/>\
                 <text class=\"axis\" x=\"{tx:.1}\" y=\"14\">{s} s</text>",
                TOP - 4.0
            );
            s += step;
        }
        for (i, r) in self.rows.iter().enumerate() {
            #[expect(clippy::cast_precision_loss, reason = "a row index")]
            let y = TOP + ROW * i as f64;
            let _ = write!(
                page,
                "<text class=\"label\" x=\"4\" y=\"{:.1}\">{}</text>",
                y + 15.0,
                esc(&r.rollout)
            );
            for l in &r.launches {
                let x1 = x(l.started_at_ms);
                let x2 = x(l.ended_at_ms.unwrap_or(t1)).max(x1 + 2.0);
                let class = if l.resumed {
                    "launch resumed"
                } else {
                    "launch"
                };
                let end = end_name(l);
                let _ = write!(
                    page,
                    "<rect class=\"{class}\" data-rollout=\"{}\" x=\"{x1:.1}\" y=\"{:.1}\" width=\"{:.1}\" \
                     height=\"{:.1}\"><title>{} attempt {}: {}; {} pauses, {} ms paused; ended {}</title></rect>",
                    esc(&r.rollout),
                    y + 3.0,
                    x2 - x1,
                    ROW - 6.0,
                    esc(&l.launch_id),
                    l.attempt,
                    esc(&l.reason),
                    l.pauses,
                    l.paused_ms,
                    esc(&end)
                );
            }
        }
        let mut stopped = false;
        for e in &self.events {
            let ex = x(e.at_ms);
            match &e.event {
                Event::Checkpoint { id, timings, .. } => {
                    let _ = write!(
                        page,
                        "<line class=\"checkpoint\" x1=\"{ex:.1}\" x2=\"{ex:.1}\" y1=\"{TOP}\" y2=\"{height}\">\
                         <title>checkpoint {} ({} ms)</title></line>",
                        esc(id),
                        timings.total_ms
                    );
                }
                Event::Stopped { .. } => stopped = true,
                Event::Resumed { from, .. } => {
                    let class = if stopped { "resume" } else { "resume crash" };
                    let what = if stopped {
                        "resumed after a stop"
                    } else {
                        "crash, resumed"
                    };
                    let from = from.as_deref().unwrap_or("no checkpoint");
                    let _ = write!(
                        page,
                        "<line class=\"{class}\" x1=\"{ex:.1}\" x2=\"{ex:.1}\" y1=\"{TOP}\" y2=\"{height}\">\
                         <title>{what} from {}</title></line><text class=\"axis crash-label\" x=\"{ex:.1}\" \
                         y=\"{}\">{what}</text>",
                        esc(from),
                        height - 2.0
                    );
                    stopped = false;
                }
                Event::FleetPaused { parked, .. } => {
                    let _ = write!(
                        page,
                        "<line class=\"fleet\" x1=\"{ex:.1}\" x2=\"{ex:.1}\" y1=\"{TOP}\" y2=\"{height}\">\
                         <title>fleet paused for a weight update ({parked} rollouts)</title></line>"
                    );
                }
                Event::FleetContinued { version } => {
                    let _ = write!(
                        page,
                        "<line class=\"fleet\" x1=\"{ex:.1}\" x2=\"{ex:.1}\" y1=\"{TOP}\" y2=\"{height}\">\
                         <title>fleet continued under policy version {}</title></line>",
                        esc(version.as_deref().unwrap_or("(unchanged)"))
                    );
                }
                Event::CheckpointFailed { id, error } => {
                    let _ = write!(
                        page,
                        "<line class=\"checkpoint failed\" x1=\"{ex:.1}\" x2=\"{ex:.1}\" y1=\"{TOP}\" \
                         y2=\"{height}\"><title>checkpoint {} failed: {}</title></line>",
                        esc(id),
                        esc(error)
                    );
                }
                Event::Started { .. }
                | Event::Finished { .. }
                | Event::Forked { .. }
                | Event::InfraRetry { .. } => {}
            }
        }
        page.push_str("</svg>\n<p class=\"legend\"><span class=\"k launch\"></span> launch \
            <span class=\"k resumed\"></span> launch that continued a saved session \
            <span class=\"k checkpoint\"></span> checkpoint <span class=\"k crash\"></span> crash and resume</p>\n");
    }

    fn durations_svg(&self, page: &mut String) {
        const LEFT: f64 = 60.0;
        const WIDTH: f64 = 900.0;
        const HEIGHT: f64 = 160.0;
        let points: Vec<(u64, &str, &rollpoint_api::wire::PhaseTimings)> = self
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Checkpoint { id, timings, .. } => Some((e.at_ms, id.as_str(), timings)),
                _ => None,
            })
            .collect();
        let max = points
            .iter()
            .map(|(_, _, t)| t.total_ms)
            .max()
            .unwrap_or(1)
            .max(1);
        let (t0, t1) = self.span();
        let _ = write!(
            page,
            "<svg id=\"checkpoint-durations\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" \
             height=\"{}\"><text class=\"axis\" x=\"2\" y=\"12\">{max} ms</text>\
             <text class=\"axis\" x=\"2\" y=\"{HEIGHT}\">0</text>",
            LEFT + WIDTH + 20.0,
            HEIGHT + 10.0
        );
        for (at, id, t) in &points {
            #[expect(clippy::cast_precision_loss, reason = "milliseconds of a run")]
            let (bx, h, hp) = (
                LEFT + (at.saturating_sub(t0)) as f64 / (t1 - t0) as f64 * WIDTH,
                t.total_ms as f64 / max as f64 * (HEIGHT - 16.0),
                t.prepare_ms as f64 / max as f64 * (HEIGHT - 16.0),
            );
            let _ = write!(
                page,
                "<rect class=\"ck-bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"6\" height=\"{h:.1}\">\
                 <title>{}: {} ms (prepare {}, commit {}, publish {}, resume {})</title></rect>\
                 <rect class=\"ck-prepare\" x=\"{:.1}\" y=\"{:.1}\" width=\"6\" height=\"{hp:.1}\"/>",
                bx - 3.0,
                HEIGHT - h,
                esc(id),
                t.total_ms,
                t.prepare_ms,
                t.commit_ms,
                t.publish_ms,
                t.resume_ms,
                bx - 3.0,
                HEIGHT - hp
            );
        }
        page.push_str(
            "</svg>\n<p class=\"legend\"><span class=\"k ck-bar\"></span> total \
            <span class=\"k ck-prepare\"></span> of which prepare (reaching a cut)</p>\n",
        );
    }
}

fn rollout_html(page: &mut String, r: &RolloutResult) {
    let reward = r.reward.map_or_else(|| "-".to_owned(), |x| x.to_string());
    let _ = write!(
        page,
        "<details class=\"rollout\" id=\"rollout-{}\"><summary>{} — {} — reward {} — attempt {}</summary>",
        esc(&r.rollout),
        esc(&r.rollout),
        r.status.as_str(),
        esc(&reward),
        r.attempt
    );
    if let Some(e) = &r.error {
        let _ = write!(page, "<p class=\"warn\">{}</p>", esc(e));
    }
    if let Some(u) = &r.usage {
        let _ = write!(
            page,
            "<p>{} model calls, {} prompt and {} completion tokens; harness {} ms, paused {} ms</p>",
            u.model_calls,
            u.prompt_tokens,
            u.completion_tokens,
            r.timings.harness_ms,
            r.timings.paused_ms
        );
    }
    if let Some(res) = &r.resources {
        let peak = res
            .memory_peak_bytes
            .map_or_else(|| "-".to_owned(), |b| format!("{} MiB", b >> 20));
        let _ = write!(
            page,
            "<p>sandbox used {:.1} s of CPU, {peak} of memory at most, {} KiB of disk; {} KiB in and \
             {} KiB out over {} connections</p>",
            f64::from(u32::try_from(res.cpu_ms).unwrap_or(u32::MAX)) / 1000.0,
            res.disk_bytes >> 10,
            res.net_bytes_in >> 10,
            res.net_bytes_out >> 10,
            res.net_connections
        );
        for hit in &res.limits_hit {
            let _ = write!(page, "<p class=\"warn\">limit hit: {}</p>", esc(hit));
        }
    }
    page.push_str(
        "<table><tr><th>launch</th><th>attempt</th><th>sandbox</th><th>resumed</th><th>why</th>\
         <th>ran ms</th><th>pauses</th><th>end</th></tr>",
    );
    for l in &r.launches {
        let ran = l.ended_at_ms.map_or_else(
            || "-".to_owned(),
            |e| (e.saturating_sub(l.started_at_ms)).to_string(),
        );
        let end = end_name(l);
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{ran}</td><td>{}</td><td>{}</td></tr>",
            esc(&l.launch_id),
            l.attempt,
            esc(&l.sandbox),
            if l.resumed { "yes" } else { "no" },
            esc(&l.reason),
            l.pauses,
            esc(&end)
        );
    }
    page.push_str("</table>");
    if let Some(resp) = &r.response {
        let _ = write!(page, "<p><b>answer</b></p><pre>{}</pre>", esc(resp));
    }
    if !r.transcript.is_empty() {
        page.push_str("<ol class=\"transcript\">");
        for m in &r.transcript {
            let _ = write!(
                page,
                "<li class=\"{}\"><b>{}</b> <pre>{}</pre>",
                esc(&m.role),
                esc(&m.role),
                esc(&m.text)
            );
            for t in &m.tool_calls {
                let _ = write!(page, "<pre class=\"tool\">$ {}</pre>", esc(t));
            }
            page.push_str("</li>");
        }
        page.push_str("</ol>");
    }
    page.push_str("</details>\n");
}

/// How a launch ended, as the launch log writes it (`-` while it runs).
fn end_name(l: &rollpoint_driver::LaunchEntry) -> String {
    l.end
        .as_ref()
        .and_then(|e| serde_json::to_value(e).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "-".to_owned())
}

/// `text` escaped for HTML text and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes the report of `run_dir` to `out` (default `RUN_DIR/report.html`), atomically and
/// mode 0600; returns where.
pub fn write_report(run_dir: &Path, out: Option<&Path>) -> Result<PathBuf, RunError> {
    let report = RunReport::read(run_dir)?;
    let path = out.map_or_else(|| run_dir.join(REPORT_FILE), Path::to_path_buf);
    crate::state::write_atomic(&path, report.html().as_bytes())?;
    Ok(path)
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:24px;color:#1d232a;background:#fff}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}\
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #d5dbe1;border-radius:6px;padding:8px 12px;min-width:110px}\
.card b{display:block;font-size:20px}.card span{color:#5b6670;font-size:12px}\
svg{display:block;border:1px solid #e3e7eb;background:#fbfcfd}\
.label{font-size:11px;fill:#1d232a}.axis{font-size:10px;fill:#5b6670}.tick{stroke:#eef1f4}\
rect.launch{fill:#2f7ed8}rect.launch.resumed{fill:#13a36b}\
line.checkpoint{stroke:#7aa7e0;stroke-width:1;stroke-dasharray:2 2}line.fleet{stroke:#9b59b6;stroke-width:1}line.checkpoint.failed{stroke:#e0a030}\
line.resume{stroke:#888;stroke-width:2}line.resume.crash{stroke:#d83a2f;stroke-width:2}\
.crash-label{fill:#d83a2f}rect.ck-bar{fill:#7aa7e0}rect.ck-prepare{fill:#2f5f9e}\
.legend{font-size:12px;color:#5b6670}.k{display:inline-block;width:12px;height:10px;margin:0 4px 0 10px}\
.k.launch{background:#2f7ed8}.k.resumed{background:#13a36b}.k.checkpoint{background:#7aa7e0}\
.k.crash{background:#d83a2f}.k.ck-bar{background:#7aa7e0}.k.ck-prepare{background:#2f5f9e}\
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #e3e7eb;padding:2px 6px;font-size:12px}\
pre{white-space:pre-wrap;margin:2px 0;font-size:12px}.warn{color:#b3261e}details{margin:4px 0}";

const SCRIPT: &str = "(function(){var s=document.getElementById('timeline');if(!s){return;}\
var r=s.getBoundingClientRect();document.body.dataset.timelineWidth=String(Math.round(r.width));\
document.body.dataset.launchBars=String(s.querySelectorAll('rect.launch').length);})();";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
