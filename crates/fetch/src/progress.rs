//! Byte-count progress on stderr: a redrawn line on a terminal, a line per 10% otherwise (so
//! logs stay short).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Progress output is on unless `LOCKSTEP_QUIET` is set (tests set it to keep output clean).
pub(crate) fn enabled() -> bool {
    std::env::var_os("LOCKSTEP_QUIET").is_none()
}

pub(crate) struct Progress {
    label: String,
    total: u64,
    done: u64,
    enabled: bool,
    tty: bool,
    last_draw: Option<Instant>,
    last_decile: u64,
}

fn mb(n: u64) -> f64 {
    n as f64 / 1e6
}

impl Progress {
    pub(crate) fn new(label: String, total: u64, enabled: bool) -> Progress {
        Progress {
            label,
            total,
            done: 0,
            enabled,
            tty: std::io::stderr().is_terminal(),
            last_draw: None,
            last_decile: 0,
        }
    }

    pub(crate) fn add(&mut self, n: u64) {
        self.done += n;
        if !self.enabled {
            return;
        }
        if self.tty {
            let due = match self.last_draw {
                None => true,
                Some(t) => t.elapsed() >= Duration::from_millis(200),
            };
            if due {
                self.last_draw = Some(Instant::now());
                eprint!("\r{}", self.line());
                let _ = std::io::stderr().flush();
            }
        } else if let Some(decile) = (self.done.min(self.total) * 10).checked_div(self.total) {
            if decile > self.last_decile {
                self.last_decile = decile;
                eprintln!("{}", self.line());
            }
        }
    }

    fn line(&self) -> String {
        if self.total > 0 {
            format!(
                "{}: {:.1} / {:.1} MB ({:.0}%)",
                self.label,
                mb(self.done),
                mb(self.total),
                self.done as f64 * 100.0 / self.total as f64
            )
        } else {
            format!("{}: {:.1} MB", self.label, mb(self.done))
        }
    }

    pub(crate) fn finish(&mut self) {
        if self.enabled && self.tty {
            eprintln!("\r{}", self.line());
        }
    }
}
