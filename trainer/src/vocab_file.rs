//! The character vocabulary as an HF `tokenizer.json`, made with the
//! `tokenizers` crate: BPE whose vocabulary is the characters, no merges, no
//! pre-tokenizer, a `Fuse` decoder (so decoding adds no spaces).

use anyhow::{anyhow, Result};
use nrgpt_core::Vocab;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::models::bpe::BPE;
use tokenizers::Tokenizer;

pub fn tokenizer_for(vocab: &Vocab) -> Result<Tokenizer> {
    let mut map = tokenizers::models::bpe::Vocab::default();
    for (i, c) in vocab.chars().iter().enumerate() {
        map.insert(c.to_string(), i as u32);
    }
    let bpe = BPE::builder().vocab_and_merges(map, vec![]).build().map_err(|e| anyhow!("building the BPE model: {e}"))?;
    let mut tk = Tokenizer::new(bpe);
    tk.with_decoder(Some(Fuse::new()));
    Ok(tk)
}

/// The tokenizer.json text for `vocab`.
pub fn tokenizer_json(vocab: &Vocab) -> Result<String> {
    tokenizer_for(vocab)?.to_string(true).map_err(|e| anyhow!("serialising tokenizer.json: {e}"))
}
