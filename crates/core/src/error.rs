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
    /// A tensor or metadata entry that is not what the file's digest says was written.
    #[error("bad checkpoint: {subject} does not match the file's digest ({why}): the file was damaged or edited after it was written")]
    Digest { subject: String, why: &'static str },
    #[error("bad model config: {0}")]
    Config(String),
    /// A config field outside its range ([`crate::bounds`]).
    #[error("bad model config: field `{field}` is {value}: {rule}")]
    ConfigField { field: &'static str, value: String, rule: String },
    /// A stored value breaking its tensor's rule ([`crate::bounds::ValueRule`]).
    #[error("tensor `{name}` element {index} is {value:e}: {rule}")]
    TensorValue { name: String, index: usize, value: f32, rule: String },
    /// A task that would allocate more than its budget ([`crate::bounds::memory`]).
    #[error(transparent)]
    Budget(Box<crate::bounds::memory::OverBudget>),
    #[error("{0}")]
    NonFinite(String),
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
    #[error("unknown quantization scheme `{0}` (expected int8, int4, f16 or f32)")]
    UnknownScheme(String),
    #[error("tensor `{name}` is stored as {got}, expected {want}")]
    TensorDtype { name: String, got: String, want: String },
    /// A packed tensor whose word or scale count does not fit its weight's shape.
    #[error("tensor `{name}` holds {got} {what}, but a {shape:?} weight at {scheme} needs {want}")]
    PackedLength { name: String, what: &'static str, got: usize, want: usize, shape: Vec<usize>, scheme: &'static str },
}

pub type Result<T> = std::result::Result<T, Error>;
