//! TEMPORARY stand-in until the quantization branch lands (same API).
use std::collections::BTreeMap;

use crate::{Error, ModelConfig, Result, Vocab};

pub const FORMAT_QUANT: &str = "nrgpt-web/quant/v1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    F32,
    F16,
    Int8,
    Int4,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PackedTensor {
    F32(Vec<f32>),
    Quant { shape: Vec<usize>, words: Vec<u32>, scales: Vec<f32> },
}

#[derive(Debug, Clone)]
pub struct PackedCheckpoint {
    pub config: ModelConfig,
    pub vocab: Vocab,
    pub scheme: Scheme,
    pub tensors: BTreeMap<String, PackedTensor>,
}

impl PackedCheckpoint {
    pub fn from_bytes(_bytes: &[u8]) -> Result<Self> {
        Err(Error::Checkpoint("quantized checkpoints are not supported yet".into()))
    }
}
