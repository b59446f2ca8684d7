//! The native trainer, behind the `trainer` CLI (`main.rs`): the data and its
//! split (`data`), the candle model (`net`) and the fast hand-written backend
//! (`fast`: NRGPT, the GPT baselines and EBT, forward and backward), AdamW
//! (`optim`), the training loop (`train`, with `divergence` and `resume`
//! guarding it, EBT's regularisers in `think_plan`), loss estimates (`eval`),
//! EBT's thinking table (`thinking_table`), export to the page's file
//! (`export`), recorded generations for the widget (`poster`), the tokenizer
//! file (`vocab_file`), files and checkpoints (`files`), the CLI's value
//! parsers (`cli_values`) and the ListOps task (`listops_*`: data, scoring,
//! the sweep and its plot).

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
pub mod run_log;
pub mod stream;
pub mod think_plan;
pub mod thinking_table;
pub mod train;
pub mod vocab_file;
