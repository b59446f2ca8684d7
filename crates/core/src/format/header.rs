//! The safetensors header every checkpoint format shares: the format tag, the
//! model config and the vocabulary in the metadata.

use std::collections::HashMap;

use safetensors::SafeTensors;

use crate::{Error, ModelConfig, Result, Vocab};

pub const FORMAT_KEY: &str = "format";
pub const FORMAT_F32: &str = "nrgpt-web/f32/v1";
pub const FORMAT_QUANT: &str = "nrgpt-web/quant/v1";
/// Metadata keys a format owns; free-form metadata may not use them.
const RESERVED: [&str; 6] = [FORMAT_KEY, "config", "vocab", "quant", "block", super::digest::DIGEST_KEY];

/// Header metadata as safetensors stores it.
pub type Metadata = HashMap<String, String>;

/// Parses the safetensors header of `bytes` and returns its tensors and metadata.
pub fn open(bytes: &[u8]) -> Result<(SafeTensors<'_>, Metadata)> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| Error::Checkpoint(format!("not a safetensors file ({e})")))?;
    let (_, header) = SafeTensors::read_metadata(bytes)?;
    Ok((st, header.metadata().clone().unwrap_or_default()))
}

pub fn meta_field<'a>(md: &'a Metadata, key: &str) -> Result<&'a str> {
    md.get(key).map(String::as_str).ok_or_else(|| Error::Checkpoint(format!("metadata has no `{key}` entry")))
}

/// The config and vocabulary every checkpoint format carries, checked against each other.
pub fn read_model_meta(md: &Metadata) -> Result<(ModelConfig, Vocab)> {
    let config: ModelConfig = serde_json::from_str(meta_field(md, "config")?).map_err(|e| Error::Checkpoint(format!("config metadata does not parse: {e}")))?;
    config.validate()?;
    let vocab = Vocab::from_json(meta_field(md, "vocab")?)?;
    check_vocab(&config, &vocab)?;
    Ok((config, vocab))
}

/// The metadata entries every checkpoint format writes: format, config, vocabulary.
pub fn model_meta(format: &str, config: &ModelConfig, vocab: &Vocab) -> Result<Metadata> {
    check_vocab(config, vocab)?;
    let mut md = Metadata::new();
    md.insert(FORMAT_KEY.into(), format.into());
    md.insert("config".into(), serde_json::to_string(config)?);
    md.insert("vocab".into(), vocab.to_json());
    Ok(md)
}

fn check_vocab(config: &ModelConfig, vocab: &Vocab) -> Result<()> {
    if vocab.len() != config.vocab_size {
        return Err(Error::Checkpoint(format!("vocabulary has {} characters but the config says {}", vocab.len(), config.vocab_size)));
    }
    Ok(())
}

pub fn is_reserved(key: &str) -> bool {
    RESERVED.contains(&key)
}
