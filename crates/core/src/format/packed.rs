//! A checkpoint's model weights as stored, not dequantized: what the GPU
//! packer uploads as they are, and what every loader reads first.
//!
//! File layout (safetensors, so any reader can open it): metadata `format` =
//! [`FORMAT_QUANT`], `quant` = the scheme, `block` = "32", `config` and
//! `vocab` as in the f32 format; a packed weight `NAME` is stored as
//! `NAME.q` (U32, [n_words]) and `NAME.scale` (F32, [n_blocks]), an f16 one as
//! `NAME` (F16, its shape), a rank-1 one as `NAME` (F32). Names and shapes
//! come from [`WeightLayout`]. There is no optimizer state. Every file also
//! carries `digest`, the checksum of each tensor and entry ([`super::digest`]).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

use candle_core::DType;
use safetensors::{Dtype, SafeTensors, View};

use super::codec::{dequantize, packed_lens, quantize, unpack, Codes, Scheme, BLOCK};
use super::digest::{seal, verify, Integrity};
use super::header::{meta_field, model_meta, open, read_model_meta, Metadata, FORMAT_F32, FORMAT_KEY, FORMAT_QUANT};
use crate::bounds::{check_values, memory, weight_rule, ValueRule, MAX_ABS_MOMENT, MAX_ABS_WEIGHT, MAX_SECOND_MOMENT};
use crate::layout::{Body, ParamSpec, WeightLayout, EBT_REPLAY, MAX_ABS_REPLAY};
use crate::model::{check_weights, Weights};
use crate::{Arch, Error, ModelConfig, Result, Vocab};

/// A parameter as the GPU engine would upload it.
#[derive(Debug, Clone, PartialEq)]
pub enum PackedTensor {
    /// Unquantized values (rank-1 parameters, f32 files, and f16 ones after conversion).
    F32(Vec<f32>),
    /// An int8 / int4 weight in the layout of [`quantize`].
    Quant { shape: Vec<usize>, words: Vec<u32>, scales: Vec<f32> },
}

impl PackedTensor {
    /// The values as f32 (`scheme` says how a `Quant` is packed).
    pub fn to_f32(&self, scheme: Scheme) -> Vec<f32> {
        match self {
            PackedTensor::F32(v) => v.clone(),
            PackedTensor::Quant { shape, words, scales } => unpack(words, scales, shape.iter().product(), scheme),
        }
    }
}

/// A checkpoint parsed but not dequantized, for engines that unpack on the
/// device. `tensors[i]` is parameter `i` of `layout`.
#[derive(Debug, Clone)]
pub struct PackedCheckpoint {
    pub config: ModelConfig,
    pub vocab: Vocab,
    pub scheme: Scheme,
    pub layout: WeightLayout,
    pub tensors: Vec<PackedTensor>,
    /// Whether the file matched its digest, or predates digests (the page shows [`Integrity::note`]).
    pub integrity: Integrity,
}

impl PackedCheckpoint {
    /// Packs f32 (or f64) weights at `scheme`. f16 weights are kept as the f32
    /// values they round to, so the view matches what the file will hold.
    pub fn pack(config: &ModelConfig, vocab: &Vocab, weights: &Weights, scheme: Scheme) -> Result<Self> {
        config.validate()?;
        let layout = WeightLayout::new(config);
        check_weights(&layout, weights)?;
        let mut tensors = Vec::with_capacity(layout.specs.len());
        for (i, spec) in layout.specs.iter().enumerate() {
            let ParamSpec { name, shape, .. } = spec;
            let data: Vec<f32> = weights[name].to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
            // never write what the reader would refuse
            check_values(name, &data, weight_rule(&layout, i))?;
            let packed = if !scheme.packs(spec) {
                PackedTensor::F32(data)
            } else if scheme == Scheme::F16 {
                // the weight bound (1e3) keeps every value inside f16's range (65504)
                PackedTensor::F32(dequantize(&quantize(&data, scheme), data.len(), scheme))
            } else {
                let Codes { words, scales } = quantize(&data, scheme);
                PackedTensor::Quant { shape: shape.clone(), words, scales }
            };
            tensors.push(packed);
        }
        Ok(Self { config: config.clone(), vocab: vocab.clone(), scheme, layout, tensors, integrity: Integrity::Verified })
    }

    /// Parses a quantized file, or an f32 one (as scheme `F32`, optimizer state ignored).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (st, md) = open(bytes)?;
        Self::from_parsed(&st, &md)
    }

    /// The model weights of an opened file; the file checked against its
    /// digest first (so damage is reported as such), then every tensor for
    /// dtype, shape and values ([`crate::bounds`]), and nothing else in the file.
    pub(crate) fn from_parsed(st: &SafeTensors, md: &Metadata) -> Result<Self> {
        let integrity = verify(st, md)?;
        let format = meta_field(md, FORMAT_KEY)?;
        let scheme = match format {
            FORMAT_F32 => Scheme::F32,
            FORMAT_QUANT => {
                let block = meta_field(md, "block")?;
                if block != BLOCK.to_string() {
                    return Err(Error::Checkpoint(format!("block size `{block}` is not supported (only {BLOCK})")));
                }
                meta_field(md, "quant")?.parse()?
            }
            _ => return Err(Error::Checkpoint(format!("format `{format}` is neither `{FORMAT_F32}` nor `{FORMAT_QUANT}`"))),
        };
        let (config, vocab) = read_model_meta(md)?;
        // before any tensor is copied out: a small file may ask for terabytes to decode
        memory::decode(&config).check(memory::HERE)?;
        let layout = WeightLayout::new(&config);
        let mut tensors = Vec::with_capacity(layout.specs.len());
        let mut expected = HashSet::new();
        for (i, spec) in layout.specs.iter().enumerate() {
            let ParamSpec { name, shape, .. } = spec;
            let t = if scheme.is_int() && scheme.packs(spec) {
                expected.extend([format!("{name}.q"), format!("{name}.scale")]);
                read_quant(st, name, shape, scheme)?
            } else {
                expected.insert(name.clone());
                let dtype = if scheme.packs(spec) { Dtype::F16 } else { Dtype::F32 };
                PackedTensor::F32(read_floats(st, name, shape, dtype)?)
            };
            check_values(name, &t.to_f32(scheme), weight_rule(&layout, i))?;
            tensors.push(t);
        }
        // an f32 training checkpoint may carry optimizer moments; a quantized file holds the model only
        if format == FORMAT_QUANT {
            if let Some(name) = st.names().into_iter().find(|n| !expected.contains(*n)) {
                return Err(Error::Checkpoint(format!("unexpected tensor `{name}` in a {scheme} checkpoint")));
            }
        } else {
            check_optimizer_state(st, config.arch, &layout, &expected)?;
        }
        Ok(Self { config, vocab, scheme, layout, tensors, integrity })
    }

    /// Parameter `i` as f32 values.
    pub fn values(&self, i: usize) -> Vec<f32> {
        self.tensors[i].to_f32(self.scheme)
    }

    /// Serialises in the quantized format (the f32 format for scheme `F32`).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut md;
        if self.scheme == Scheme::F32 {
            md = model_meta(FORMAT_F32, &self.config, &self.vocab)?;
        } else {
            md = model_meta(FORMAT_QUANT, &self.config, &self.vocab)?;
            md.insert("quant".into(), self.scheme.name().into());
            md.insert("block".into(), BLOCK.to_string());
        }
        let mut out: Vec<(String, RawView)> = Vec::new();
        if self.tensors.len() != self.layout.specs.len() || self.layout != WeightLayout::new(&self.config) {
            return Err(Error::Checkpoint(format!("{} tensors do not match the config's layout", self.tensors.len())));
        }
        for (spec, tensor) in self.layout.specs.iter().zip(&self.tensors) {
            let (name, shape) = (spec.name.clone(), spec.shape.clone());
            let numel = spec.numel();
            match tensor {
                PackedTensor::F32(v) if v.len() != numel => return Err(Error::WeightShape { name, got: vec![v.len()], want: shape }),
                PackedTensor::F32(v) if self.scheme == Scheme::F16 && self.scheme.packs(spec) => {
                    let mut bytes = le_bytes(&quantize(v, Scheme::F16).words);
                    bytes.truncate(numel * 2); // drop the odd element's padding half
                    out.push((name, RawView { dtype: Dtype::F16, shape, bytes }));
                }
                PackedTensor::F32(v) => out.push((name, RawView { dtype: Dtype::F32, shape, bytes: f32_bytes(v) })),
                PackedTensor::Quant { shape: s, words, scales } => {
                    if !self.scheme.is_int() || s != &shape {
                        return Err(Error::Checkpoint(format!("`{name}` is packed but the checkpoint is {}", self.scheme)));
                    }
                    check_lens(&name, &shape, words.len(), scales.len(), self.scheme)?;
                    let q = RawView { dtype: Dtype::U32, shape: vec![words.len()], bytes: le_bytes(words) };
                    let sc = RawView { dtype: Dtype::F32, shape: vec![scales.len()], bytes: f32_bytes(scales) };
                    out.push((format!("{name}.q"), q));
                    out.push((format!("{name}.scale"), sc));
                }
            }
        }
        seal(&mut md, &out)?;
        Ok(safetensors::serialize(out, Some(md))?)
    }
}

/// Little-endian 32-bit words of `bytes` (safetensors data need not be aligned).
fn words_of(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn le_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn check_lens(name: &str, shape: &[usize], words: usize, scales: usize, scheme: Scheme) -> Result<()> {
    let (want_w, want_s) = packed_lens(shape.iter().product(), scheme);
    // name the stored tensor that is wrong, `NAME.q` or `NAME.scale`
    let err = |part, what, got, want| Error::PackedLength { name: format!("{name}.{part}"), what, got, want, shape: shape.to_vec(), scheme: scheme.name() };
    if words != want_w {
        return Err(err("q", "words", words, want_w));
    }
    if scales != want_s {
        return Err(err("scale", "scales", scales, want_s));
    }
    Ok(())
}

/// A tensor's view, checked to be `dtype`, with its little-endian bytes.
fn view_bytes<'a>(st: &SafeTensors<'a>, name: &str, dtype: Dtype) -> Result<(Vec<usize>, &'a [u8])> {
    let v = st.tensor(name).map_err(|_| Error::MissingWeight(name.to_string()))?;
    if v.dtype() != dtype {
        return Err(Error::TensorDtype { name: name.into(), got: format!("{:?}", v.dtype()), want: format!("{dtype:?}") });
    }
    Ok((v.shape().to_vec(), v.data()))
}

/// An F32 or F16 tensor of exactly `shape`, as f32.
fn read_floats(st: &SafeTensors, name: &str, shape: &[usize], dtype: Dtype) -> Result<Vec<f32>> {
    let (got, bytes) = view_bytes(st, name, dtype)?;
    if got != shape {
        return Err(Error::WeightShape { name: name.into(), got, want: shape.to_vec() });
    }
    Ok(match dtype {
        Dtype::F16 => bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        _ => words_of(bytes).map(f32::from_bits).collect(),
    })
}

/// Beyond the weights an f32 file may hold AdamW's moments and nothing else:
/// `opt.m.NAME` and `opt.v.NAME` for every parameter (all or none), F32, of
/// the parameter's shape, with bounded values.
fn check_optimizer_state(st: &SafeTensors, arch: Arch, layout: &WeightLayout, weights: &HashSet<String>) -> Result<()> {
    // sorted, so the error names the same tensor every time
    let extras: BTreeSet<&str> = st.names().into_iter().filter(|n| !weights.contains(*n)).collect();
    if extras.is_empty() {
        return Ok(());
    }
    // a tensor that is neither a moment of this config's parameters nor the
    // replay buffer is named as what it is, before any talk of moments: a
    // weights-only file with a stowaway, or with its `arch` edited, holds no
    // optimizer state at all
    let ebt = matches!(layout.body, Body::Ebt(_));
    let is_moment = |n: &str| ["opt.m.", "opt.v."].iter().any(|p| n.strip_prefix(p).is_some_and(|w| weights.contains(w)));
    if let Some(name) = extras.iter().find(|n| !(is_moment(n) || (ebt && **n == EBT_REPLAY))) {
        return Err(Error::Checkpoint(format!(
            "unexpected tensor `{name}`: not one of the {} parameters of its config (arch {}) nor their optimizer moments; was the file written with another config?",
            layout.specs.len(),
            arch.name()
        )));
    }
    for spec in &layout.specs {
        for (prefix, rule) in [("opt.m.", ValueRule::Abs(MAX_ABS_MOMENT)), ("opt.v.", ValueRule::NonNegative(MAX_SECOND_MOMENT))] {
            let name = format!("{prefix}{}", spec.name);
            if !extras.contains(name.as_str()) {
                return Err(Error::Checkpoint(format!("optimizer state is incomplete: `{name}` is missing")));
            }
            check_values(&name, &read_floats(st, &name, &spec.shape, Dtype::F32)?, rule)?;
        }
    }
    if ebt && extras.contains(EBT_REPLAY) {
        let (dims, _) = view_bytes(st, EBT_REPLAY, Dtype::F32)?;
        let (block, v) = (layout.specs[layout.pos].shape[0], layout.specs[layout.tok].shape[0]);
        if dims.len() != 3 || dims[1] != block || dims[2] != v {
            return Err(Error::Checkpoint(format!("`{EBT_REPLAY}` has shape {dims:?}, expected (k, {block}, {v})")));
        }
        check_values(EBT_REPLAY, &read_floats(st, EBT_REPLAY, &dims, Dtype::F32)?, ValueRule::Abs(MAX_ABS_REPLAY))?;
    }
    Ok(())
}

/// `NAME.q` and `NAME.scale` of an int8 / int4 weight, checked against `shape`.
fn read_quant(st: &SafeTensors, name: &str, shape: &[usize], scheme: Scheme) -> Result<PackedTensor> {
    let vector = |part: &str, dtype| -> Result<&[u8]> {
        let full = format!("{name}.{part}");
        let (dims, bytes) = view_bytes(st, &full, dtype)?;
        if dims.len() != 1 {
            return Err(Error::Checkpoint(format!("`{full}` has shape {dims:?}, expected one dimension")));
        }
        Ok(bytes)
    };
    let words: Vec<u32> = words_of(vector("q", Dtype::U32)?).collect();
    let scales: Vec<f32> = words_of(vector("scale", Dtype::F32)?).map(f32::from_bits).collect();
    check_values(&format!("{name}.scale"), &scales, ValueRule::NonNegative(MAX_ABS_WEIGHT))?;
    check_lens(name, shape, words.len(), scales.len(), scheme)?;
    Ok(PackedTensor::Quant { shape: shape.to_vec(), words, scales })
}

/// Raw little-endian bytes with a dtype and shape, for `safetensors::serialize`.
struct RawView {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for RawView {
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
