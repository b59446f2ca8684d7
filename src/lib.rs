//! nrgpt-web: the browser app (Leptos, compiled to wasm) over the model core
//! (`nrgpt-core`, crates/core) and the decoding engine (`nrgpt-engine`,
//! crates/engine). Natively this crate is empty; the page lives in [`web`].

#[cfg(target_arch = "wasm32")]
pub mod web;
