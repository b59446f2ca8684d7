//! A run's `log.csv`: a row per training step and per evaluation. It is read
//! strictly (a damaged row is an error naming the file and the line, never an
//! empty history), and appended one write per row, each synced, so a crash or
//! a full disk leaves whole rows only.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::files::write_atomic;

pub const HEADER: &str = "iter,lr,loss,grad_norm,train_loss,val_loss,tok_per_s,elapsed_s";
const COLUMNS: usize = 8;

/// One checked row: its iteration and its text.
pub struct Row {
    pub iter: usize,
    pub line: String,
}

impl Row {
    /// Column `i` as a number; None where the row leaves it empty.
    pub fn value(&self, i: usize) -> Option<f64> {
        self.line.split(',').nth(i)?.parse().ok()
    }
}

/// Why line `n` (1-based) of a log is not a row of ours.
fn check_row(n: usize, line: &str) -> std::result::Result<Row, String> {
    let cols: Vec<&str> = line.split(',').collect();
    if cols.len() != COLUMNS {
        return Err(format!("line {n} has {} columns, not {COLUMNS}", cols.len()));
    }
    let iter = cols[0].parse().map_err(|_| format!("line {n} starts with {:?}, not an iteration", cols[0]))?;
    if let Some(c) = cols[1..].iter().find(|c| !c.is_empty() && c.parse::<f64>().is_err()) {
        return Err(format!("line {n} holds {c:?}, not a number"));
    }
    Ok(Row { iter, line: line.to_string() })
}

/// The rows of the log at `path`, each checked; None when there is no log.
pub fn read(path: &Path) -> Result<Option<Vec<Row>>> {
    // try_exists, not exists: a folder we may not read is an error, not "no log"
    if !path.try_exists().with_context(|| format!("reading {}", path.display()))? {
        return Ok(None);
    }
    let text = crate::read::text(path, crate::read::TEXT_LIMIT, "the log")?;
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        bail!("{} is damaged: line 1 is not the log's header `{HEADER}`", path.display());
    }
    let rows = lines.enumerate().map(|(i, l)| check_row(i + 2, l)).collect::<std::result::Result<Vec<_>, _>>();
    rows.map(Some).map_err(|why| anyhow::anyhow!("{} is damaged: {why}", path.display()))
}

/// Whether `path` holds rows, not only the header a run killed before its
/// first checkpoint leaves (which is nothing to lose).
pub fn has_rows(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(m.len() > HEADER.len() as u64 + 1),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A new log holding the header only.
pub fn create(path: &Path) -> Result<()> {
    write_atomic(path, format!("{HEADER}\n").as_bytes())
}

/// For `--resume` from iteration `start`: keeps the rows before it (the
/// resumed run writes the rest again). A damaged log stops the resume
/// rather than lose its history; a missing one is started anew, with a
/// warning saying what is lost.
pub fn truncate_for_resume(path: &Path, start: usize) -> Result<()> {
    let rows = read(path).with_context(|| {
        format!("--resume keeps the run's log, so it stops here: repair {0}, or move it aside to resume with a new log (its rows before iteration {start} are then not in log.csv)", path.display())
    })?;
    let Some(rows) = rows else {
        eprintln!("warning: {} is missing: the log of iterations 0..{start} is lost; a new log starts at iteration {start} (the checkpoint and best.safetensors are kept)", path.display());
        return create(path);
    };
    let mut out = format!("{HEADER}\n");
    for r in rows.iter().filter(|r| r.iter < start) {
        out.push_str(&r.line);
        out.push('\n');
    }
    write_atomic(path, out.as_bytes())
}

/// Appends rows to a log, one write each, synced; a failed append names the
/// log and cuts off whatever part of the row was written.
pub struct Appender {
    file: File,
    path: PathBuf,
    /// Bytes of whole rows: where a failed append is cut back to.
    len: u64,
}

impl Appender {
    pub fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new().append(true).open(path).with_context(|| format!("opening {}", path.display()))?;
        let len = file.metadata().with_context(|| format!("reading {}", path.display()))?.len();
        Ok(Self { file, path: path.to_path_buf(), len })
    }

    pub fn append(&mut self, row: &str) -> Result<()> {
        let line = format!("{row}\n");
        // one write_all of the whole row: a reader never sees half of one
        if let Err(e) = self.file.write_all(line.as_bytes()).and_then(|()| self.file.sync_data()) {
            // a half-written row would make the next --resume stop at a damaged log
            let _ = self.file.set_len(self.len);
            return Err(e).with_context(|| format!("appending a row to {}", self.path.display()));
        }
        self.len += line.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nrgpt-log-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn damage_is_named_with_its_line() {
        let d = dir("damage");
        let log = d.join("log.csv");
        for (text, want) in [
            (format!("{HEADER}\n0,,,,4.1,4.2,,0.1\n1,1e-3,4.0,0.5,,,100.0\n"), "line 3 has 7 columns"),
            (format!("{HEADER}\n0,,,,4.1,4.2,,0.1\nx,,,,4.1,4.2,,0.1\n"), "line 3 starts with \"x\""),
            (format!("{HEADER}\n0,,,,4.1,4..2,,0.1\n"), "line 2 holds \"4..2\""),
            ("iter,loss\n".to_string(), "line 1 is not the log's header"),
        ] {
            std::fs::write(&log, text).unwrap();
            let err = format!("{:#}", read(&log).err().expect("a damaged log was read"));
            assert!(err.contains("log.csv is damaged") && err.contains(want), "{err}");
        }
        std::fs::write(&log, [HEADER.as_bytes(), b"\n0,,,,4.1,\xff4.2,,0.1\n"].concat()).unwrap();
        let err = format!("{:#}", truncate_for_resume(&log, 5).unwrap_err());
        assert!(err.contains("log.csv is not UTF-8") && err.contains("move it aside"), "{err}");
        assert!(std::fs::read(&log).unwrap().contains(&0xff), "the damaged log was replaced");
    }

    #[test]
    fn a_resume_keeps_the_rows_before_it_and_starts_a_missing_log_anew() {
        let d = dir("resume");
        let log = d.join("log.csv");
        std::fs::write(&log, format!("{HEADER}\n0,,,,4.1,4.2,,0.1\n0,3e-3,4.0,0.5,,,100.0,0.2\n5,,,,3.1,3.2,,0.3\n")).unwrap();
        truncate_for_resume(&log, 5).unwrap();
        let rows = read(&log).unwrap().unwrap();
        assert_eq!(rows.iter().map(|r| r.iter).collect::<Vec<_>>(), [0, 0]);
        assert_eq!(rows[0].value(5), Some(4.2));
        std::fs::remove_file(&log).unwrap();
        truncate_for_resume(&log, 5).unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{HEADER}\n"));
    }

    #[test]
    fn a_failed_append_names_the_log_and_leaves_whole_rows() {
        let d = dir("append");
        let log = d.join("log.csv");
        create(&log).unwrap();
        let mut a = Appender::open(&log).unwrap();
        a.append("0,,,,4.1,4.2,,0.1").unwrap();
        // a handle that cannot write: the append fails as on a full disk
        let mut broken = Appender { file: File::open(&log).unwrap(), path: log.clone(), len: a.len };
        let err = format!("{:#}", broken.append("1,3e-3,4.0,0.5,,,100.0,0.2").unwrap_err());
        assert!(err.contains("appending a row to") && err.contains("log.csv"), "{err}");
        assert_eq!(read(&log).unwrap().unwrap().len(), 1);
    }
}
