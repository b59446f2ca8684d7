//! nrgpt-core: energy-based character language models, the part every other
//! crate builds on. The weight layout ([`layout`]) names and shapes every
//! parameter once; the energies and their *analytic* gradients live in
//! [`energy`] and [`norm`]; the recurrent descent `x <- x - eta * dE/dg` in
//! [`nrgpt`]; the Energy-Based Transformer, which descends on its prediction,
//! in [`ebt`]; the baselines in [`gpt`]; element-wise math shared with the
//! CPU decoder and the fast trainer in [`scalar`]. This crate knows nothing
//! of the decoding engine or the web page.

pub mod bounds;
pub mod config;
pub mod ebt;
pub mod ebt_session;
pub mod energy;
pub mod error;
pub mod format;
pub mod gpt;
pub mod layout;
pub mod linear;
pub mod listops;
pub mod model;
pub mod norm;
pub mod nrgpt;
pub mod ops;
pub mod projection;
pub mod rng;
pub mod sample;
pub mod scalar;
pub mod session;
pub mod vocab;

pub use config::{Activation, Arch, BlockNorm, EbtInput, EbtUpdate, EtaInit, EtaKind, GptBlock, ModelConfig, NormKind};
pub use error::{Error, Result};
pub use format::Checkpoint;
pub use model::{Forward, ForwardOpts, Model, Weights};
pub use vocab::Vocab;
