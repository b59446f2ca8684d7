//! The corpus as token ids, nanoGPT's 90/10 split, and random training windows.

use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use nrgpt_core::rng::Rng64;
use nrgpt_core::Vocab;

use crate::read::{self, CharReader, TEXT_LIMIT};

pub struct Corpus {
    pub train: Vec<u32>,
    pub val: Vec<u32>,
}

impl Corpus {
    /// Reads `path` (at most [`TEXT_LIMIT`] bytes), encodes it with `vocab`,
    /// and splits it (first 90% train).
    pub fn load(path: &Path, vocab: &Vocab) -> Result<Self> {
        let text = read::text(path, TEXT_LIMIT, "the corpus")?;
        let ids = vocab.encode(&text).with_context(|| format!("encoding {}", path.display()))?;
        if ids.len() < 1000 {
            bail!("the corpus {} has only {} characters", path.display(), ids.len());
        }
        let n = ids.len() * 9 / 10;
        Ok(Self { train: ids[..n].to_vec(), val: ids[n..].to_vec() })
    }
}

/// The train split (`train`) or the val split of the corpus at `path`, or
/// with `max_chars` only its first characters, reading no further than
/// that needs: the train split stops once it is sure they lie before the
/// 90% point; the val split counts the characters once without keeping
/// them, to find where it starts.
pub fn load_split(path: &Path, vocab: &Vocab, train: bool, max_chars: Option<usize>) -> Result<Vec<u32>> {
    let Some(n) = max_chars else {
        let c = Corpus::load(path, vocab)?;
        return Ok(if train { c.train } else { c.val });
    };
    let open = || CharReader::open(path, TEXT_LIMIT, "the corpus");
    let text = if train {
        let mut r = open()?;
        let (head, got) = r.read(n, true)?;
        // n characters are all train once the file holds n * 10/9 of them
        let sure = n.saturating_mul(10) / 9 + 2;
        let (_, more) = r.read(sure - got, false)?;
        let total = got + more;
        if total < sure {
            head.chars().take(total * 9 / 10).collect()
        } else {
            head
        }
    } else {
        let (_, total) = open()?.read(usize::MAX, false)?;
        let mut r = open()?;
        r.read(total * 9 / 10, false)?;
        r.read(n, true)?.0
    };
    vocab.encode(&text).with_context(|| format!("encoding {}", path.display()))
}

/// `batch` random windows of `block + 1` tokens: inputs (B, block) and targets shifted by one.
pub fn random_batch(data: &[u32], batch: usize, block: usize, rng: &mut Rng64, dev: &Device) -> Result<(Tensor, Tensor)> {
    let (x, y) = random_batch_ids(data, batch, block, rng)?;
    Ok((Tensor::from_vec(x, (batch, block), dev)?, Tensor::from_vec(y, (batch, block), dev)?))
}

/// The same windows as `random_batch` (same draws), as flat id vectors.
pub fn random_batch_ids(data: &[u32], batch: usize, block: usize, rng: &mut Rng64) -> Result<(Vec<u32>, Vec<u32>)> {
    if data.len() <= block + 1 {
        bail!("split of {} tokens is shorter than the block size {block}", data.len());
    }
    let mut x = Vec::with_capacity(batch * block);
    let mut y = Vec::with_capacity(batch * block);
    for _ in 0..batch {
        let start = rng.below(data.len() - block - 1);
        x.extend_from_slice(&data[start..start + block]);
        y.extend_from_slice(&data[start + 1..start + block + 1]);
    }
    Ok((x, y))
}

/// Non-overlapping windows covering the whole split (the last, shorter one dropped).
pub fn all_windows(data: &[u32], block: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..data.len().saturating_sub(1) / block)
        .map(|w| {
            let s = w * block;
            (data[s..s + block].to_vec(), data[s + 1..s + block + 1].to_vec())
        })
        .collect()
}
