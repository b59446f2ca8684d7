//! Shared helpers for the core's integration tests.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use nrgpt_core::model::{init_weights, Weights};
use nrgpt_core::rng::Rng64;
use nrgpt_core::{Arch, ModelConfig, Model};

/// Random tensor with entries N(0, std^2), f64 on CPU.
pub fn randn(shape: &[usize], std: f64, rng: &mut Rng64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.normal() * std).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

pub fn to_vec(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap()
}

/// Relative error of `a` against `b` in the 2-norm.
pub fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum::<f64>().sqrt();
    let den: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt().max(1e-30);
    num / den
}

pub fn tiny_config(arch: Arch) -> ModelConfig {
    let mut c = ModelConfig::new(arch, 11, 16, 2, 3, 12);
    c.ff_mult = 2;
    c
}

/// A random model whose weights are large enough (std 0.3) for the energies
/// to have real structure, in f64.
pub fn random_model(cfg: &ModelConfig, seed: u64) -> (Model, Weights) {
    let mut w = init_weights(cfg, seed, DType::F64, &Device::Cpu).unwrap();
    let mut rng = Rng64::new(seed ^ 0xABCD);
    for (name, t) in w.iter_mut() {
        if name.ends_with("wq") || name.ends_with("wk") || name.contains("ff.w") || name.contains("mlp.w") || name.contains("emb") {
            *t = randn(t.dims(), 0.3, &mut rng);
        }
    }
    (Model::new(cfg, &w).unwrap(), w)
}

pub fn ids(v: &[u32]) -> Tensor {
    Tensor::from_slice(v, (1, v.len()), &Device::Cpu).unwrap()
}

/// The EBT test vocabulary.
pub const EBT_CHARS: &str = "abcdefghij \n";

/// A small EBT over `EBT_CHARS` (d 24, 2 heads, S = 3, an 8-character window; noise 1).
pub fn ebt_config(act: nrgpt_core::Activation, norm: nrgpt_core::NormKind, layers: usize) -> ModelConfig {
    let mut c = ModelConfig::new(Arch::Ebt, EBT_CHARS.chars().count(), 24, 2, 3, 8);
    c.layers = layers;
    c.ff_mult = 2;
    c.activation = act;
    c.norm = norm;
    c.ebt_noise = 1.0;
    c
}

/// A random EBT whose energy has real structure (std 0.3 matrices), thinking step `a`.
pub fn ebt_checkpoint(cfg: &ModelConfig, seed: u64, a: f32) -> nrgpt_core::Checkpoint {
    let mut w = init_weights(cfg, seed, DType::F32, &Device::Cpu).unwrap();
    let mut rng = Rng64::new(seed ^ 0xE17);
    for t in w.values_mut() {
        if t.rank() == 2 {
            *t = randn(t.dims(), 0.3, &mut rng).to_dtype(DType::F32).unwrap();
        }
    }
    w.insert("ebt.log_a".into(), Tensor::new(&[a.ln()], &Device::Cpu).unwrap());
    let vocab = nrgpt_core::Vocab::from_chars(EBT_CHARS.chars().collect()).unwrap();
    nrgpt_core::Checkpoint {
        config: cfg.clone(),
        vocab,
        weights: w,
        extra: Default::default(),
        meta: Default::default(),
        integrity: nrgpt_core::format::Integrity::Verified,
    }
}
