//! Quantized checkpoints: int8 / int4 with one symmetric scale per block of
//! 32 weights, or plain f16, so the page downloads 4-8x less.
//!
//! The packing is shaped for WGSL, which has no 8-bit storage type: a tensor
//! becomes `u32` words plus `f32` scales, and a shader reads element `i` as a
//! bit field of word `i / (32 / bits)`. Only the rank-2 weights are packed;
//! the small rank-1 ones (gammas, biases, alpha, log_c, ff_scale) stay f32,
//! since they cost nothing and are the most sensitive to rounding.
//!
//! File layout (safetensors, so any reader can open it): metadata `format` =
//! [`FORMAT_QUANT`], `quant` = the scheme, `block` = "32", `config` and
//! `vocab` as in the f32 format; a packed weight `NAME` is stored as
//! `NAME.q` (U32, [n_words]) and `NAME.scale` (F32, [n_blocks]), an f16 one as
//! `NAME` (F16, its shape), a rank-1 one as `NAME` (F32). Shapes come from
//! `param_specs(config)`. There is no optimizer state.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use candle_core::DType;
use safetensors::{Dtype, SafeTensors, View};

use crate::checkpoint::{meta_field, model_meta, open, read_model_meta, FORMAT_F32, FORMAT_KEY};
use crate::model::{param_specs, Weights};
use crate::{Error, ModelConfig, Result, Vocab};

pub const FORMAT_QUANT: &str = "nrgpt-web/quant/v1";
/// Weights sharing one scale.
pub const BLOCK: usize = 32;
/// Metadata keys the quantized format adds to the f32 format's.
pub(crate) const QUANT_RESERVED: [&str; 2] = ["quant", "block"];

/// How the rank-2 weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Unquantized.
    F32,
    F16,
    Int8,
    Int4,
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Scheme::F32 => "f32",
            Scheme::F16 => "f16",
            Scheme::Int8 => "int8",
            Scheme::Int4 => "int4",
        }
    }

    /// Bits per stored element.
    pub fn bits(self) -> usize {
        match self {
            Scheme::F32 => 32,
            Scheme::F16 => 16,
            Scheme::Int8 => 8,
            Scheme::Int4 => 4,
        }
    }

    /// Integer schemes: scaled per block of [`BLOCK`].
    pub fn is_int(self) -> bool {
        matches!(self, Scheme::Int8 | Scheme::Int4)
    }

    /// Largest code of an integer scheme; symmetric, so -qmax..=qmax (the
    /// two's complement minimum -128 / -8 is never used).
    fn qmax(self) -> f32 {
        match self {
            Scheme::Int8 => 127.0,
            Scheme::Int4 => 7.0,
            Scheme::F32 | Scheme::F16 => unreachable!("{} has no integer codes", self.name()),
        }
    }

    /// Whether a parameter of this shape is stored at this scheme (else f32).
    pub fn packs(self, shape: &[usize]) -> bool {
        self != Scheme::F32 && shape.len() == 2
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scheme {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Scheme::F32),
            "f16" => Ok(Scheme::F16),
            "int8" => Ok(Scheme::Int8),
            "int4" => Ok(Scheme::Int4),
            _ => Err(Error::UnknownScheme(s.to_string())),
        }
    }
}

/// One tensor in the GPU layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub words: Vec<u32>,
    /// One per block for int8 / int4; empty for f16 / f32.
    pub scales: Vec<f32>,
}

/// (words, scales) a tensor of `numel` elements packs into. Integer schemes
/// pad to whole blocks, so a block never straddles a word.
pub fn packed_lens(numel: usize, scheme: Scheme) -> (usize, usize) {
    let per_word = 32 / scheme.bits();
    if scheme.is_int() {
        let blocks = numel.div_ceil(BLOCK);
        (blocks * BLOCK / per_word, blocks)
    } else {
        (numel.div_ceil(per_word), 0)
    }
}

/// Packs row-major `data`. int8 element i is byte (i % 4) of word i / 4,
/// int4 element i is nibble (i % 8) of word i / 8 (bits 4k..4k+3), both two's
/// complement; f16 element i is half (i % 2) of word i / 2. Non-finite inputs
/// give meaningless codes: check before packing.
pub fn quantize(data: &[f32], scheme: Scheme) -> Packed {
    let (n_words, n_scales) = packed_lens(data.len(), scheme);
    let bits = scheme.bits();
    let mut words = vec![0u32; n_words];
    let mut scales = Vec::with_capacity(n_scales);
    let mut put = |i: usize, code: u32| {
        let per_word = 32 / bits;
        // keep only the field's bits (a negative code's sign extension would spill)
        let field = if bits == 32 { code } else { code & ((1 << bits) - 1) };
        words[i / per_word] |= field << (bits * (i % per_word));
    };
    match scheme {
        Scheme::F32 => data.iter().enumerate().for_each(|(i, x)| put(i, x.to_bits())),
        Scheme::F16 => data.iter().enumerate().for_each(|(i, &x)| put(i, f32_to_f16(x) as u32)),
        Scheme::Int8 | Scheme::Int4 => {
            let qmax = scheme.qmax();
            for (b, block) in data.chunks(BLOCK).enumerate() {
                // symmetric: the block's largest magnitude maps to ±qmax
                let scale = block.iter().fold(0f32, |m, x| m.max(x.abs())) / qmax;
                scales.push(scale);
                for (j, &x) in block.iter().enumerate() {
                    // q = round(x / scale), clamped; an all-zero block keeps q = 0 (no 0/0)
                    let q = if scale == 0.0 { 0.0 } else { (x / scale).round().clamp(-qmax, qmax) };
                    put(b * BLOCK + j, q as i32 as u32);
                }
                // the padding of the last block stays 0: the words start zeroed
            }
        }
    }
    Packed { words, scales }
}

/// Unpacks the first `numel` elements. Panics if `p` is shorter than
/// [`packed_lens`] says (the checkpoint reader checks this first).
pub fn dequantize(p: &Packed, numel: usize, scheme: Scheme) -> Vec<f32> {
    unpack(&p.words, &p.scales, numel, scheme)
}

fn unpack(words: &[u32], scales: &[f32], numel: usize, scheme: Scheme) -> Vec<f32> {
    let bits = scheme.bits();
    let per_word = 32 / bits;
    // the raw `bits`-wide field of element i
    let field = |i: usize| {
        let w = words[i / per_word] >> (bits * (i % per_word));
        if bits == 32 { w } else { w & ((1 << bits) - 1) }
    };
    (0..numel)
        .map(|i| match scheme {
            Scheme::F32 => f32::from_bits(field(i)),
            Scheme::F16 => f16_to_f32(field(i) as u16),
            Scheme::Int8 | Scheme::Int4 => {
                // sign-extend the two's complement field: shift its sign bit to bit 31, then back arithmetically
                let q = ((field(i) << (32 - bits)) as i32) >> (32 - bits);
                // x = q * scale of the element's block
                q as f32 * scales[i / BLOCK]
            }
        })
        .collect()
}

/// IEEE binary16 bits of `x`, rounded to nearest, ties to even (as `half` does).
fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        // inf stays inf; NaN keeps its top payload bits and stays quiet
        return sign | 0x7c00 | if man != 0 { 0x200 | (man >> 13) as u16 } else { 0 };
    }
    // rebias the exponent: f32 bias 127, f16 bias 15
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00; // too large: inf
    }
    // (mantissa, with its implicit 1 where f16 cannot keep it, bits to drop, exponent field)
    let (mant, shift, exp_field) = if e > 0 {
        (man, 13, (e as u32) << 10)
    } else if e >= -10 {
        // subnormal: value = m * 2^-24, so drop 14 - e bits of the 24-bit mantissa
        (man | 0x80_0000, (14 - e) as u32, 0)
    } else {
        return sign; // below half the smallest subnormal: rounds to zero
    };
    let kept = exp_field | (mant >> shift);
    let rem = mant & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    // round to nearest, ties to even; a carry correctly bumps the exponent (up to inf)
    let up = rem > half || (rem == half && kept & 1 == 1);
    sign | (kept + up as u32) as u16
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    match exp {
        0 => {
            // zero or subnormal: value = man * 2^-24 (exact in f32)
            let v = man as f32 * f32::powi(2.0, -24);
            if sign != 0 { -v } else { v }
        }
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        // rebias 15 -> 127 and widen the mantissa 10 -> 23 bits
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

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
/// device. Holds exactly the parameters of `param_specs(config)`.
#[derive(Debug, Clone)]
pub struct PackedCheckpoint {
    pub config: ModelConfig,
    pub vocab: Vocab,
    pub scheme: Scheme,
    pub tensors: BTreeMap<String, PackedTensor>,
}

impl PackedCheckpoint {
    /// Packs f32 (or f64) weights at `scheme`. f16 weights are kept as the f32
    /// values they round to, so the view matches what the file will hold.
    pub fn pack(config: &ModelConfig, vocab: &Vocab, weights: &Weights, scheme: Scheme) -> Result<Self> {
        config.validate()?;
        let mut tensors = BTreeMap::new();
        for (name, shape, _) in param_specs(config) {
            let t = weights.get(&name).ok_or_else(|| Error::MissingWeight(name.clone()))?;
            if t.dims() != shape.as_slice() {
                return Err(Error::WeightShape { name, got: t.dims().to_vec(), want: shape });
            }
            let data: Vec<f32> = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
            if data.iter().any(|x| !x.is_finite()) {
                return Err(Error::Checkpoint(format!("weight `{name}` has non-finite values")));
            }
            let packed = if !scheme.packs(&shape) {
                PackedTensor::F32(data)
            } else if scheme == Scheme::F16 {
                let halves = dequantize(&quantize(&data, scheme), data.len(), scheme);
                // |x| above 65504 would silently become inf
                if halves.iter().any(|x| !x.is_finite()) {
                    return Err(Error::Checkpoint(format!("weight `{name}` has values beyond the f16 range")));
                }
                PackedTensor::F32(halves)
            } else {
                let Packed { words, scales } = quantize(&data, scheme);
                PackedTensor::Quant { shape, words, scales }
            };
            tensors.insert(name, packed);
        }
        Ok(Self { config: config.clone(), vocab: vocab.clone(), scheme, tensors })
    }

    /// Parses a quantized file, or an f32 one (as scheme `F32`, optimizer state ignored).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (st, md) = open(bytes)?;
        let format = meta_field(&md, FORMAT_KEY)?;
        let scheme = match format {
            FORMAT_F32 => Scheme::F32,
            FORMAT_QUANT => {
                let block = meta_field(&md, "block")?;
                if block != BLOCK.to_string() {
                    return Err(Error::Checkpoint(format!("block size `{block}` is not supported (only {BLOCK})")));
                }
                meta_field(&md, "quant")?.parse()?
            }
            _ => return Err(Error::Checkpoint(format!("format `{format}` is neither `{FORMAT_F32}` nor `{FORMAT_QUANT}`"))),
        };
        let (config, vocab) = read_model_meta(&md)?;
        let mut tensors = BTreeMap::new();
        let mut expected = HashSet::new();
        for (name, shape, _) in param_specs(&config) {
            let t = if scheme.is_int() && scheme.packs(&shape) {
                expected.extend([format!("{name}.q"), format!("{name}.scale")]);
                read_quant(&st, &name, &shape, scheme)?
            } else {
                expected.insert(name.clone());
                let dtype = if scheme.packs(&shape) { Dtype::F16 } else { Dtype::F32 };
                PackedTensor::F32(read_floats(&st, &name, &shape, dtype)?)
            };
            tensors.insert(name, t);
        }
        // an f32 training checkpoint may carry optimizer moments; a quantized file holds the model only
        if format == FORMAT_QUANT {
            if let Some(name) = st.names().into_iter().find(|n| !expected.contains(*n)) {
                return Err(Error::Checkpoint(format!("unexpected tensor `{name}` in a {scheme} checkpoint")));
            }
        }
        Ok(Self { config, vocab, scheme, tensors })
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
        for (name, shape, _) in param_specs(&self.config) {
            let numel: usize = shape.iter().product();
            match self.tensors.get(&name).ok_or_else(|| Error::MissingWeight(name.clone()))? {
                PackedTensor::F32(v) if v.len() != numel => {
                    return Err(Error::WeightShape { name, got: vec![v.len()], want: shape })
                }
                PackedTensor::F32(v) if self.scheme == Scheme::F16 && self.scheme.packs(&shape) => {
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
    let err = |part, what, got, want| Error::PackedLength {
        name: format!("{name}.{part}"),
        what,
        got,
        want,
        shape: shape.to_vec(),
        scheme: scheme.name(),
    };
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
        Dtype::F16 => bytes.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect(),
        _ => words_of(bytes).map(f32::from_bits).collect(),
    })
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
