//! Progress of a long operation on stderr: redrawn in place on a terminal,
//! or (with `--progress` when stderr is not one) a line a second.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    enabled: bool,
    terminal: bool,
    label: &'static str,
    started: Instant,
    last: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// `forced`: show it even when stderr is not a terminal.
    pub fn new(forced: bool, label: &'static str) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        Progress {
            enabled: forced || terminal,
            terminal,
            label,
            started: Instant::now(),
            last: None,
            drawn: false,
        }
    }

    pub fn update(&mut self, done: u64, what: &str) {
        if !self.enabled || !self.due() {
            return;
        }
        let seconds = self.started.elapsed().as_secs_f64();
        let rate = if seconds > 0.0 {
            done as f64 / seconds
        } else {
            0.0
        };
        self.draw(&format!(
            "{}: {done} {what} ({rate:.0}/s, {seconds:.1} s)",
            self.label
        ));
    }

    /// A line of its own (no count and rate), with the time so far.
    pub fn status(&mut self, text: &str) {
        if !self.enabled || !self.due() {
            return;
        }
        let seconds = self.started.elapsed().as_secs_f64();
        self.draw(&format!("{}: {text} ({seconds:.1} s)", self.label));
    }

    fn due(&mut self) -> bool {
        let every = if self.terminal {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        };
        if self.last.is_some_and(|last| last.elapsed() < every) {
            return false;
        }
        self.last = Some(Instant::now());
        true
    }

    fn draw(&mut self, line: &str) {
        let mut err = std::io::stderr();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
        self.drawn = true;
    }

    pub fn finish(&mut self) {
        if self.enabled && self.terminal && self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
        self.drawn = false;
    }
}
