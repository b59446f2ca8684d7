//! The native trainer: data, optimizer, training loop, evaluation and the
//! tokenizer file, behind the `trainer` CLI.

pub mod data;
pub mod eval;
pub mod export;
pub mod fast;
pub mod net;
pub mod optim;
pub mod train;
pub mod vocab_file;
