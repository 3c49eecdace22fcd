//! Percentiles and number formatting for the tables.

use std::time::Duration;

/// Summary of a latency sample, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pct {
    pub n: usize,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    pub mean: u64,
}

/// Nearest-rank percentiles of `v` (sorted in place).
pub fn pct(v: &mut [u64]) -> Pct {
    if v.is_empty() {
        return Pct::default();
    }
    v.sort_unstable();
    let at = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Pct {
        n: v.len(),
        p50: at(0.50),
        p99: at(0.99),
        max: v[v.len() - 1],
        mean: (v.iter().map(|&x| u128::from(x)).sum::<u128>() / v.len() as u128) as u64,
    }
}

/// Nanoseconds as milliseconds with 3 decimals.
pub fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// A duration as milliseconds with 1 decimal.
pub fn dms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// A rate with thousands separators.
pub fn rate(per_sec: f64) -> String {
    group(per_sec.round() as u64)
}

/// An integer with `,` every three digits.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes as MiB with 1 decimal.
pub fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1024.0 * 1024.0))
}
