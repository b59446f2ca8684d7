//! The native trainer: data, optimizer, training loop, evaluation and the
//! tokenizer file, behind the `trainer` CLI.

// Each unsafe operation gets its own block and SAFETY note, even inside an unsafe fn.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod budget;
pub mod cli_values;
pub mod data;
pub mod divergence;
pub mod eval;
pub mod export;
pub mod fast;
pub mod files;
pub mod listops_cli;
pub mod listops_data;
pub mod listops_plot;
pub mod listops_score;
pub mod listops_sweep;
pub mod net;
pub mod optim;
pub mod poster;
pub mod read;
pub mod resume;
pub mod think_plan;
pub mod thinking_table;
pub mod train;
pub mod vocab_file;
