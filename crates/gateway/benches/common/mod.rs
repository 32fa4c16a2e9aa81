//! What the gateway's benchmarks share: the load's settings from the command line and the
//! median, min and max of a row.
#![allow(dead_code, reason = "each benchmark uses a different part")]

/// The load: clients, calls each, rounds, and how the model streams.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub clients: usize,
    pub calls: usize,
    pub rounds: usize,
    pub chunks: usize,
    pub chunk_delay_ms: u64,
}

impl Setup {
    /// `defaults` with `--clients N --calls N --rounds N --chunks N --chunk-delay-ms N` from
    /// the command line applied.
    #[must_use]
    pub fn from_args(defaults: Self) -> Self {
        let mut s = defaults;
        let args: Vec<String> = std::env::args().collect();
        let mut i = 1;
        while i < args.len() {
            let value = || args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
            let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            let used = match args[i].as_str() {
                "--clients" => value().map(|v| s.clients = to_usize(v)),
                "--calls" => value().map(|v| s.calls = to_usize(v)),
                "--rounds" => value().map(|v| s.rounds = to_usize(v)),
                "--chunks" => value().map(|v| s.chunks = to_usize(v)),
                "--chunk-delay-ms" => value().map(|v| s.chunk_delay_ms = v),
                _ => None,
            };
            i += if used.is_some() { 2 } else { 1 };
        }
        s
    }
}

/// Prints `rows` (name, one value per round) as median, min and max.
pub fn print_table<N: std::fmt::Display>(rows: impl IntoIterator<Item = (N, Vec<f64>)>) {
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "metric", "median", "min", "max"
    );
    for (name, values) in rows {
        let (med, min, max) = stats(values);
        println!("{name:<34} {med:>10.3} {min:>10.3} {max:>10.3}");
    }
}

/// Median, min and max.
#[must_use]
pub fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// One HTTP client per simulated harness, built once for the whole run: building one loads
/// the platform's root certificates, which would otherwise dominate a round's CPU.
pub fn clients(n: usize) -> Vec<reqwest::Client> {
    (0..n)
        .map(|_| {
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .build()
                .unwrap()
        })
        .collect()
}
