//! Every file the trainer reads goes through here: only a regular file is
//! opened (a FIFO would block in `open`, a device never ends), nothing past
//! a size limit is read (`/dev/full` behind a symlink once grew the trainer
//! to 24 GB), and a caller that needs only the first characters stops
//! reading there. Errors name the file.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Text inputs (a corpus, `--ood` texts, a tokenizer, a run's log): 256 MiB,
/// 230 times Tiny Shakespeare; encoded as u32 ids a corpus is 4x that.
pub const TEXT_LIMIT: u64 = 256 << 20;
/// A checkpoint: 2^28 parameters with their two AdamW moments are 3 GiB.
pub const CHECKPOINT_LIMIT: u64 = 4 << 30;

/// Opens `path` if it is a regular file ([`crate::files::open_regular`]); returns its length.
fn open_regular(path: &Path, what: &str) -> Result<(File, u64)> {
    let file = crate::files::open_regular(path).map_err(|e| anyhow::anyhow!("{what} {e:#}"))?;
    let len = file.metadata().with_context(|| format!("reading {what} {}", path.display()))?.len();
    Ok((file, len))
}

fn too_large(path: &Path, what: &str, len: u64, limit: u64) -> anyhow::Error {
    anyhow::anyhow!("{what} {} holds {len} bytes, more than the {limit} this reads", path.display())
}

/// The bytes of `path`, at most `limit` of them (a file that grows while
/// read is cut there and refused).
pub fn bytes(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let (f, len) = open_regular(path, what)?;
    if len > limit {
        return Err(too_large(path, what, len, limit));
    }
    let mut out = Vec::new();
    f.take(limit + 1).read_to_end(&mut out).with_context(|| format!("reading {what} {}", path.display()))?;
    if out.len() as u64 > limit {
        bail!("{what} {} grew past {limit} bytes while it was read", path.display());
    }
    Ok(out)
}

/// The text of `path` (UTF-8), at most `limit` bytes; a byte that is not
/// UTF-8 is an error naming the file and where the bad byte is.
pub fn text(path: &Path, limit: u64, what: &str) -> Result<String> {
    String::from_utf8(bytes(path, limit, what)?).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        anyhow::anyhow!("{what} {} is not UTF-8 text: byte {at} is not valid UTF-8", path.display())
    })
}

/// The characters of a UTF-8 file, read in chunks: where a character starts
/// is known from its first byte, so characters can be counted or skipped
/// without holding the file. Only a read that reaches past `limit` bytes
/// fails: a caller that stops earlier may open a larger file.
pub struct CharReader {
    inner: BufReader<std::io::Take<File>>,
    path: std::path::PathBuf,
    what: String,
    len: u64,
    limit: u64,
    /// Bytes of the character read so far (0 before the first).
    pending: Vec<u8>,
}

impl CharReader {
    pub fn open(path: &Path, limit: u64, what: &str) -> Result<Self> {
        let (f, len) = open_regular(path, what)?;
        Ok(Self { inner: BufReader::new(f.take(limit)), path: path.to_path_buf(), what: what.to_string(), len, limit, pending: Vec::new() })
    }

    /// Reads up to `n` more characters: their text if `keep`, else only
    /// their count. Stops at the end of the file.
    pub fn read(&mut self, n: usize, keep: bool) -> Result<(String, usize)> {
        if n == 0 {
            return Ok((String::new(), 0));
        }
        let mut out = Vec::new();
        let mut count = 0;
        let mut byte = [0u8; 1];
        loop {
            let got = self.inner.read(&mut byte).with_context(|| format!("reading {} {}", self.what, self.path.display()))?;
            if got == 0 && self.len > self.limit {
                return Err(too_large(&self.path, &self.what, self.len, self.limit));
            }
            // a byte that is not a continuation (10xxxxxx) starts the next character
            let starts = got == 0 || byte[0] & 0xC0 != 0x80;
            if starts && !self.pending.is_empty() {
                if keep {
                    out.extend_from_slice(&self.pending);
                }
                self.pending.clear();
                count += 1;
            }
            if got == 0 || (starts && count == n) {
                if got == 1 {
                    self.pending.push(byte[0]);
                }
                break;
            }
            self.pending.push(byte[0]);
        }
        let text = String::from_utf8(out).with_context(|| format!("{} {} is not UTF-8 text", self.what, self.path.display()))?;
        Ok((text, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("nrgpt-read-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn characters_are_read_in_pieces_across_multibyte_ones() {
        let p = file("chars", "aé🦀b\ncd");
        let mut r = CharReader::open(&p, TEXT_LIMIT, "the text").unwrap();
        assert_eq!(r.read(2, true).unwrap(), ("aé".to_string(), 2));
        assert_eq!(r.read(1, false).unwrap(), (String::new(), 1));
        assert_eq!(r.read(10, true).unwrap(), ("b\ncd".to_string(), 4));
        assert_eq!(r.read(10, true).unwrap(), (String::new(), 0));
    }

    #[test]
    fn devices_directories_and_oversized_files_are_refused_by_name() {
        for (path, want) in [("/dev/zero", "not a regular file"), ("/", "a directory")] {
            let err = bytes(Path::new(path), TEXT_LIMIT, "the corpus").unwrap_err().to_string();
            assert!(err.contains(path) && err.contains(want), "{err}");
        }
        let p = file("big", "0123456789");
        let err = text(&p, 9, "the log").unwrap_err().to_string();
        assert!(err.contains("holds 10 bytes, more than the 9"), "{err}");
        assert_eq!(text(&p, 10, "the log").unwrap(), "0123456789");
    }
}
