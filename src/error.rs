//! Typed errors of the core crate.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error("safetensors: {0}")]
    SafeTensors(#[from] safetensors::SafeTensorError),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("bad checkpoint: {0}")]
    Checkpoint(String),
    #[error("bad model config: {0}")]
    Config(String),
    #[error("vocabulary: {0}")]
    Vocab(String),
    #[error("no usable GPU: {0}")]
    NoGpu(String),
    #[error("GPU: {0}")]
    Gpu(String),
    #[error("missing weight `{0}`")]
    MissingWeight(String),
    #[error("weight `{name}` has shape {got:?}, expected {want:?}")]
    WeightShape { name: String, got: Vec<usize>, want: Vec<usize> },
}

pub type Result<T> = std::result::Result<T, Error>;
