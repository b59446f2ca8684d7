//! nrgpt-web core: energy-based character language models.
//!
//! One model definition serves the trainer (candle autograd through the
//! unrolled descent), the CPU reference and, later, the GPU engine. The
//! energies and their *analytic* gradients live in [`energy`] and [`norm`];
//! the recurrent descent `x <- x - eta * dE/dg` lives in [`nrgpt`]; the
//! baselines it is compared against live in [`gpt`].

pub mod checkpoint;
pub mod config;
pub mod energy;
pub mod engine;
pub mod error;
pub mod gpt;
pub mod linear;
pub mod model;
pub mod norm;
pub mod nrgpt;
pub mod projection;
pub mod quant;
pub mod rng;
pub mod sample;
pub mod session;
pub mod vocab;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use checkpoint::Checkpoint;
pub use config::{Activation, Arch, EtaKind, ModelConfig, NormKind};
pub use error::{Error, Result};
pub use model::{Forward, ForwardOpts, Model, Weights};
pub use vocab::Vocab;
