//! Valid checkpoint files to damage, and a way to take a safetensors file
//! apart and put it back together (for the loader tests and the fuzzer).
#![allow(dead_code)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use candle_core::{DType, Device, Tensor};
use nrgpt_core::format::{digest, Integrity, Scheme};
use nrgpt_core::model::{init_weights, Weights};
use nrgpt_core::{Arch, Checkpoint, ModelConfig, Vocab};
use safetensors::{Dtype, SafeTensors, View};

pub const CHARS: &str = "\n !',.:;?abcdefghijklmnopqrstuvwxyz";

pub fn vocab() -> Vocab {
    Vocab::from_text(CHARS).unwrap()
}

pub fn config(arch: Arch) -> ModelConfig {
    let mut c = ModelConfig::new(arch, vocab().len(), 16, 2, 2, 8);
    c.ff_mult = 2;
    c
}

/// A training checkpoint of `arch`: weights plus AdamW moments (m random-ish, v positive).
pub fn f32_checkpoint(arch: Arch) -> Checkpoint {
    let cfg = config(arch);
    let weights = init_weights(&cfg, 5, DType::F32, &Device::Cpu).unwrap();
    let mut extra = Weights::new();
    for (name, t) in &weights {
        extra.insert(format!("opt.m.{name}"), (t * 0.1).unwrap());
        extra.insert(format!("opt.v.{name}"), (t.sqr().unwrap() + 1e-6).unwrap());
    }
    let mut meta = BTreeMap::new();
    meta.insert("train_state".to_string(), "{}".to_string());
    Checkpoint { config: cfg, vocab: vocab(), weights, extra, meta, integrity: Integrity::Verified }
}

pub fn f32_bytes(arch: Arch) -> Vec<u8> {
    f32_checkpoint(arch).to_bytes().unwrap()
}

pub fn quant_bytes(arch: Arch, scheme: Scheme) -> Vec<u8> {
    f32_checkpoint(arch).to_quant_bytes(scheme).unwrap()
}

/// One stored tensor: dtype, shape, raw little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Raw {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// A safetensors file taken apart.
#[derive(Debug, Clone)]
pub struct Parts {
    pub meta: HashMap<String, String>,
    pub tensors: BTreeMap<String, Raw>,
}

impl Parts {
    pub fn of(bytes: &[u8]) -> Self {
        let st = SafeTensors::deserialize(bytes).unwrap();
        let (_, header) = SafeTensors::read_metadata(bytes).unwrap();
        let meta = header.metadata().clone().unwrap_or_default();
        let tensors = st.tensors().into_iter().map(|(n, v)| (n, Raw { dtype: v.dtype(), shape: v.shape().to_vec(), bytes: v.data().to_vec() })).collect();
        Self { meta, tensors }
    }

    /// The file with a fresh digest: what a writer that wrote these very
    /// tensors would produce (a digest is no signature), so the reader's own
    /// rules, not the digest, must refuse it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let tensors: Vec<(String, &Raw)> = self.tensors.iter().map(|(n, r)| (n.clone(), r)).collect();
        let mut meta = self.meta.clone();
        digest::seal(&mut meta, &tensors).unwrap();
        safetensors::serialize(tensors, Some(meta)).unwrap()
    }

    /// The file with its metadata as it is, the digest included: damage
    /// done after the writer sealed it.
    pub fn to_bytes_unsealed(&self) -> Vec<u8> {
        safetensors::serialize(self.tensors.iter().map(|(n, r)| (n.clone(), r)), Some(self.meta.clone())).unwrap()
    }

    /// Sets element `i` of an F32 tensor.
    pub fn set_f32(&mut self, name: &str, i: usize, x: f32) -> &mut Self {
        let r = self.tensors.get_mut(name).unwrap_or_else(|| panic!("no tensor {name}"));
        assert_eq!(r.dtype, Dtype::F32, "{name}");
        r.bytes[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes());
        self
    }

    /// Edits the config JSON in the metadata.
    pub fn edit_config(&mut self, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> &mut Self {
        let mut cfg: serde_json::Value = serde_json::from_str(&self.meta["config"]).unwrap();
        f(cfg.as_object_mut().unwrap());
        self.meta.insert("config".into(), cfg.to_string());
        self
    }
}

/// The f32 values of a tensor, for building a replacement.
pub fn tensor_f32(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}
