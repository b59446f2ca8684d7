//! The quantization codes: int8 / int4 with one symmetric scale per block of
//! 32 weights, or plain f16, so the page downloads 4-8x less.
//!
//! The packing is shaped for WGSL, which has no 8-bit storage type: a tensor
//! becomes `u32` words plus `f32` scales, and a shader reads element `i` as a
//! bit field of word `i / (32 / bits)`. Which tensors are packed is the
//! layout's call ([`ParamSpec::quantized`]). Pure functions: no file format here.

use crate::layout::ParamSpec;
use crate::{Error, Result};

/// Weights sharing one scale.
pub const BLOCK: usize = 32;
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

    /// Whether a parameter is stored at this scheme (else f32).
    pub fn packs(self, spec: &ParamSpec) -> bool {
        self != Scheme::F32 && spec.quantized()
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

/// One tensor's codes in the GPU layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Codes {
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
pub fn quantize(data: &[f32], scheme: Scheme) -> Codes {
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
        Scheme::F16 => data.iter().enumerate().for_each(|(i, &x)| put(i, half::f16::from_f32(x).to_bits() as u32)),
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
    Codes { words, scales }
}

/// Unpacks the first `numel` elements. Panics if `p` is shorter than
/// [`packed_lens`] says (the checkpoint reader checks this first).
pub fn dequantize(p: &Codes, numel: usize, scheme: Scheme) -> Vec<f32> {
    unpack(&p.words, &p.scales, numel, scheme)
}

pub(crate) fn unpack(words: &[u32], scales: &[f32], numel: usize, scheme: Scheme) -> Vec<f32> {
    let bits = scheme.bits();
    let per_word = 32 / bits;
    // the raw `bits`-wide field of element i
    let field = |i: usize| {
        let w = words[i / per_word] >> (bits * (i % per_word));
        if bits == 32 {
            w
        } else {
            w & ((1 << bits) - 1)
        }
    };
    (0..numel)
        .map(|i| match scheme {
            Scheme::F32 => f32::from_bits(field(i)),
            Scheme::F16 => half::f16::from_bits(field(i) as u16).to_f32(),
            Scheme::Int8 | Scheme::Int4 => {
                // sign-extend the two's complement field: shift its sign bit to bit 31, then back arithmetically
                let q = ((field(i) << (32 - bits)) as i32) >> (32 - bits);
                // x = q * scale of the element's block
                q as f32 * scales[i / BLOCK]
            }
        })
        .collect()
}
