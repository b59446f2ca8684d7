//! Checkpoint files, f32 and quantized, in safetensors. One reader parses a
//! file once ([`PackedCheckpoint::from_bytes`]); [`Checkpoint`] dequantizes
//! it into candle tensors for the reference model and the trainer, the GPU
//! packer uploads the packed codes as they are.

mod checkpoint;
pub mod codec;
pub mod digest;
pub mod header;
mod packed;

pub use checkpoint::Checkpoint;
pub use codec::{dequantize, packed_lens, quantize, Codes, Scheme, BLOCK};
pub use digest::Integrity;
pub use header::{FORMAT_F32, FORMAT_QUANT};
pub use packed::{PackedCheckpoint, PackedTensor};
