//! `trainer sample`'s output while it runs: each character goes to stdout as
//! it is drawn (a long run shows, and a kill keeps, what it wrote so far), and
//! once the run has taken a few seconds a progress line goes to stderr every
//! few seconds, unless stdout is the terminal already showing the text.

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// A run shorter than this shows no progress.
const QUIET_FOR: Duration = Duration::from_secs(3);
/// Time between progress lines.
const EVERY: Duration = Duration::from_secs(5);

pub struct CharStream<O: Write, E: Write> {
    /// Where the text goes; None: it is kept for a JSON report instead.
    out: Option<O>,
    err: E,
    progress: bool,
    total: usize,
    done: usize,
    t0: Instant,
    next_report: Instant,
    /// The first write that failed; it stops the run.
    failed: Option<std::io::Error>,
}

impl CharStream<std::io::Stdout, std::io::Stderr> {
    /// Streams to stdout unless `json`; progress when stdout is no terminal.
    pub fn stdout(total: usize, json: bool) -> Self {
        let out = std::io::stdout();
        let progress = json || !out.is_terminal();
        Self::new((!json).then_some(out), std::io::stderr(), progress, total)
    }
}

impl<O: Write, E: Write> CharStream<O, E> {
    pub fn new(out: Option<O>, err: E, progress: bool, total: usize) -> Self {
        let t0 = Instant::now();
        Self { out, err, progress, total, done: 0, t0, next_report: t0 + QUIET_FOR, failed: None }
    }

    /// Writes `text` now (the prompt, the final newline).
    pub fn write(&mut self, text: &str) -> std::io::Result<()> {
        match &mut self.out {
            Some(out) => out.write_all(text.as_bytes()).and_then(|()| out.flush()),
            None => Ok(()),
        }
    }

    /// One generated character: written at once, with progress when due.
    pub fn emit(&mut self, ch: &str) -> ControlFlow<()> {
        if let Err(e) = self.write(ch) {
            self.failed = Some(e);
            return ControlFlow::Break(());
        }
        self.done += 1;
        let now = Instant::now();
        if self.progress && now >= self.next_report && self.done < self.total {
            let secs = (now - self.t0).as_secs_f64();
            let left = secs / self.done as f64 * (self.total - self.done) as f64;
            // progress is a courtesy: a stderr that cannot take it does not stop the run
            let _ = writeln!(self.err, "sample: {} of {} characters in {secs:.0} s, about {left:.0} s left", self.done, self.total);
            self.next_report = now + EVERY;
        }
        ControlFlow::Continue(())
    }

    /// The write error that stopped the run, if one did.
    pub fn failure(&mut self) -> Option<std::io::Error> {
        self.failed.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_are_written_as_they_come_and_progress_only_after_a_while() {
        let mut s = CharStream::new(Some(Vec::new()), Vec::new(), true, 4);
        s.write("AB:").unwrap();
        assert!(s.emit("x").is_continue());
        assert_eq!(s.out.as_deref(), Some(&b"AB:x"[..]));
        assert!(s.err.is_empty(), "progress before {QUIET_FOR:?}");
        s.next_report = Instant::now();
        assert!(s.emit("y").is_continue());
        let err = String::from_utf8(s.err.clone()).unwrap();
        assert!(err.starts_with("sample: 2 of 4 characters in"), "{err}");
    }

    /// A writer that always fails, as a closed pipe does.
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_stops_the_run_with_its_error() {
        let mut s = CharStream::new(Some(Closed), Vec::new(), false, 4);
        assert!(s.emit("x").is_break());
        assert_eq!(s.failure().map(|e| e.kind()), Some(std::io::ErrorKind::BrokenPipe));
    }
}
