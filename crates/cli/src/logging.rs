//! Logs of the host binary: `tracing` events on stderr, filtered by `RUST_LOG` (default
//! `info`). `--log-format text` (the default) prints one line per event, `rollpoint: [level: ]
//! message key=value... [span fields]`, above the progress bars when there are bars;
//! `--log-format json` prints one JSON object per event (timestamp, level, target, fields,
//! the current span and the span list) for files and log shippers, and no bars.

use std::io::Write as _;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// How log events are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the subscriber for the process.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env_lossy();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr);
    // A second init (there is none) would only keep the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.event_format(Line).try_init(),
        LogFormat::Json => {
            rollpoint_run::run_loop::progress::allow_bars(false);
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(true)
                .try_init()
        }
    };
}

/// `rollpoint: [level: ]message fields [span fields]`.
struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "rollpoint: ")?;
        match *event.metadata().level() {
            Level::ERROR => write!(writer, "error: ")?,
            Level::WARN => write!(writer, "warning: ")?,
            Level::INFO => {}
            Level::DEBUG => write!(writer, "debug: ")?,
            Level::TRACE => write!(writer, "trace: ")?,
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        let mut open = false;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                let Some(fields) = ext.get::<FormattedFields<N>>() else {
                    continue;
                };
                if fields.is_empty() {
                    continue;
                }
                write!(writer, "{}{fields}", if open { " " } else { " [" })?;
                open = true;
            }
        }
        if open {
            write!(writer, "]")?;
        }
        writeln!(writer)
    }
}

/// Each event goes to stderr in one write, above the progress bars if they are drawn.
struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        EventBuffer(Vec::with_capacity(256))
    }
}

struct EventBuffer(Vec<u8>);

impl std::io::Write for EventBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut self.0);
        rollpoint_run::run_loop::progress::above_bars(|| {
            // A closed stderr has nowhere to say so.
            let _ = std::io::stderr().lock().write_all(&bytes);
        });
    }
}
