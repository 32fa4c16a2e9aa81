//! What `rollpoint run` and `rollpoint resume` show while they work: rollouts
//! done, in flight (queued and parked among them), checkpoints taken and
//! the last one's duration. On a terminal these are bars (`indicatif`, on
//! stderr) redrawn as things change, with log lines printed above them;
//! otherwise (a pipe, a file, CI) a `progress` event every few seconds and the
//! log events as they come, so logs stay readable. Log events reach stderr
//! through [`above_bars`], so a line never tears a bar; JSON logs turn the
//! bars off ([`allow_bars`]).

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Counts shown on stderr.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub total: usize,
    pub done: usize,
    pub in_flight: usize,
    pub queued: usize,
    pub parked: usize,
    pub checkpoints: u32,
    pub last_checkpoint: Option<(String, Duration)>,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} done, {} in flight ({} queued, {} parked), {} checkpoints",
            self.done, self.total, self.in_flight, self.queued, self.parked, self.checkpoints
        )?;
        if let Some((id, took)) = &self.last_checkpoint {
            write!(f, ", last {id} in {} ms", took.as_millis())?;
        }
        Ok(())
    }
}

impl Progress {
    fn flight_message(&self) -> String {
        format!("({} queued, {} parked)", self.queued, self.parked)
    }

    fn checkpoint_message(&self) -> String {
        match &self.last_checkpoint {
            Some((id, took)) => format!(
                "{} checkpoints, last {id} in {} ms",
                self.checkpoints,
                took.as_millis()
            ),
            None => format!("{} checkpoints", self.checkpoints),
        }
    }
}

static BARS_ALLOWED: AtomicBool = AtomicBool::new(true);
/// The bars being drawn, for [`above_bars`].
static DRAWN: Mutex<Option<MultiProgress>> = Mutex::new(None);

/// Whether [`Reporter::for_stderr`] may draw bars (not when logs are JSON).
pub fn allow_bars(allowed: bool) {
    BARS_ALLOWED.store(allowed, Ordering::SeqCst);
}

/// Runs `write` with the bars (if any are drawn) cleared, then redraws them.
pub fn above_bars(write: impl FnOnce()) {
    let drawn = DRAWN.lock().unwrap_or_else(PoisonError::into_inner).clone();
    match drawn {
        Some(multi) if !multi.is_hidden() => multi.suspend(write),
        _ => write(),
    }
}

/// Where progress goes.
#[derive(Debug)]
pub struct Reporter {
    bars: Option<Bars>,
}

#[derive(Debug)]
struct Bars {
    multi: MultiProgress,
    done: ProgressBar,
    flight: ProgressBar,
    checkpoints: ProgressBar,
}

const BAR: &str = "{prefix:>10} [{bar:32}] {pos}/{len} {msg}";
const LINE: &str = "{prefix:>10} {msg}";

fn bar(multi: &MultiProgress, prefix: &'static str, template: &str, len: u64) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = multi.add(ProgressBar::new(len).with_style(style));
    bar.set_prefix(prefix);
    bar
}

impl Reporter {
    /// Bars when stderr is a terminal, plain lines otherwise.
    pub fn for_stderr() -> Self {
        if BARS_ALLOWED.load(Ordering::SeqCst) && std::io::stderr().is_terminal() {
            let reporter = Self::bars(ProgressDrawTarget::stderr());
            if let Some(b) = &reporter.bars {
                *DRAWN.lock().unwrap_or_else(PoisonError::into_inner) = Some(b.multi.clone());
            }
            reporter
        } else {
            Self::plain()
        }
    }

    /// Plain periodic lines on stderr.
    pub fn plain() -> Self {
        Self { bars: None }
    }

    /// Bars drawn to `target`.
    pub fn bars(target: ProgressDrawTarget) -> Self {
        let multi = MultiProgress::with_draw_target(target);
        let done = bar(&multi, "done", BAR, 0);
        let flight = bar(&multi, "in flight", BAR, 0);
        let checkpoints = bar(&multi, "checkpoint", LINE, 0);
        Self {
            bars: Some(Bars {
                multi,
                done,
                flight,
                checkpoints,
            }),
        }
    }

    /// How often [`Self::tick`] is due: bars are redrawn every second,
    /// plain lines every five.
    pub fn period(&self) -> Duration {
        if self.bars.is_some() {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(5)
        }
    }

    /// Shows `p` now (bars only: plain output waits for [`Self::tick`]).
    pub fn update(&self, p: &Progress) {
        let Some(b) = &self.bars else {
            return;
        };
        let total = p.total as u64;
        b.done.set_length(total);
        b.done.set_position(p.done as u64);
        b.flight.set_length(total);
        b.flight.set_position(p.in_flight as u64);
        b.flight.set_message(p.flight_message());
        b.checkpoints.set_message(p.checkpoint_message());
    }

    /// The periodic report: a plain line, or a redraw of the bars.
    pub fn tick(&self, p: &Progress) {
        match &self.bars {
            None => tracing::info!(
                done = p.done,
                total = p.total,
                in_flight = p.in_flight,
                queued = p.queued,
                parked = p.parked,
                checkpoints = p.checkpoints,
                "progress"
            ),
            Some(_) => self.update(p),
        }
    }

    /// Leaves the bars as they last stood (not filled up).
    pub fn finish(&self, p: &Progress) {
        self.update(p);
        if let Some(b) = &self.bars {
            b.done.abandon();
            b.flight.abandon();
            b.checkpoints.abandon();
            let mut drawn = DRAWN.lock().unwrap_or_else(PoisonError::into_inner);
            *drawn = None;
        }
    }

    /// What the bars show: (done, in flight, total, in-flight message,
    /// checkpoint message); `None` for plain output.
    pub fn shown(&self) -> Option<(u64, u64, Option<u64>, String, String)> {
        self.bars.as_ref().map(|b| {
            (
                b.done.position(),
                b.flight.position(),
                b.done.length(),
                b.flight.message(),
                b.checkpoints.message(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Progress {
        Progress {
            total: 16,
            done: 5,
            in_flight: 8,
            queued: 2,
            parked: 3,
            checkpoints: 4,
            last_checkpoint: Some(("ck-9".to_owned(), Duration::from_millis(1250))),
        }
    }

    #[test]
    fn bars_follow_the_counts() {
        let r = Reporter::bars(ProgressDrawTarget::hidden());
        r.update(&Progress {
            total: 16,
            ..Progress::default()
        });
        let (done, flight, total, _, checkpoints) = r.shown().expect("bars");
        assert_eq!((done, flight, total), (0, 0, Some(16)));
        assert_eq!(checkpoints, "0 checkpoints");

        r.update(&sample());
        let (done, flight, total, in_flight, checkpoints) = r.shown().expect("bars");
        assert_eq!((done, flight, total), (5, 8, Some(16)));
        assert_eq!(in_flight, "(2 queued, 3 parked)");
        assert_eq!(checkpoints, "4 checkpoints, last ck-9 in 1250 ms");

        r.finish(&Progress {
            done: 15,
            in_flight: 0,
            ..sample()
        });
        let (done, flight, ..) = r.shown().expect("bars");
        assert_eq!((done, flight), (15, 0), "finishing fills no bar up");
    }

    #[test]
    fn plain_output_is_one_line_per_tick() {
        let r = Reporter::plain();
        assert!(r.shown().is_none());
        assert_eq!(
            sample().to_string(),
            "5/16 done, 8 in flight (2 queued, 3 parked), 4 checkpoints, last ck-9 in 1250 ms"
        );
        assert_eq!(
            Progress::default().to_string(),
            "0/0 done, 0 in flight (0 queued, 0 parked), 0 checkpoints"
        );
    }
}
