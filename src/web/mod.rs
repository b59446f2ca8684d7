//! The browser app: a Leptos page (`start_page`) and the inference worker
//! (`worker_main`) share one wasm module; index.html and www/worker.js pick
//! the entry point.

pub mod app;
pub mod chart;
pub mod client;
pub mod explain;
pub mod ebt_chart;
pub mod fetch;
pub mod gpu_probe;
pub mod listops_tab;
pub mod manifest;
pub mod protocol;
pub mod watch;
pub mod worker;

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Mounts the page into `#app-root` (or the body); its worker is started from `worker_url`.
#[wasm_bindgen]
pub fn start_page(worker_url: String) {
    worker::console_panic_hook();
    client::set_worker_url(worker_url);
    let root =
        web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id("app-root")).and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok());
    match root {
        Some(el) => {
            el.set_inner_html("");
            leptos::mount::mount_to(el, app::App).forget()
        }
        None => leptos::mount::mount_to_body(app::App),
    }
}
