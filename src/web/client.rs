//! The page's handle on the inference worker: starts it, queues messages
//! until its wasm is ready and hands every reply to one callback.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::*;
use web_sys::{MessageEvent, Worker, WorkerOptions, WorkerType};

use super::protocol::{from_js, to_js, FromWorker, ToWorker};

/// The worker bootstrap, relative to the page.
pub const WORKER_URL: &str = "www/worker.js";

struct Inner {
    worker: Worker,
    ready: bool,
    queue: Vec<ToWorker>,
}

#[derive(Clone)]
pub struct Client(Rc<RefCell<Inner>>);

impl Client {
    pub fn start(on_reply: impl Fn(FromWorker) + 'static) -> Result<Self, String> {
        let opts = WorkerOptions::new();
        opts.set_type(WorkerType::Module);
        let worker = Worker::new_with_options(WORKER_URL, &opts)
            .map_err(|e| format!("could not start the inference worker ({WORKER_URL}): {e:?}"))?;
        let client = Client(Rc::new(RefCell::new(Inner { worker: worker.clone(), ready: false, queue: Vec::new() })));
        let on_reply = Rc::new(on_reply);
        let (me, reply) = (client.clone(), on_reply.clone());
        let on_msg = Closure::<dyn Fn(MessageEvent)>::new(move |ev: MessageEvent| {
            let msg = from_js::<FromWorker>(ev.data()).unwrap_or_else(|message| FromWorker::Error { run: 0, message });
            if let FromWorker::Ready = msg {
                let queued = {
                    let mut inner = me.0.borrow_mut();
                    inner.ready = true;
                    std::mem::take(&mut inner.queue)
                };
                queued.into_iter().for_each(|m| me.send(m));
            }
            reply(msg);
        });
        worker.set_onmessage(Some(on_msg.as_ref().unchecked_ref()));
        on_msg.forget(); // the worker lives as long as the page
        // A worker that fails to start (bootstrap or wasm missing) only says so here.
        let on_err = Closure::<dyn Fn(web_sys::ErrorEvent)>::new(move |e: web_sys::ErrorEvent| {
            web_sys::console::error_2(&"inference worker error".into(), &e);
            let what = if e.message().is_empty() { "it failed to start (is www/pkg built?)".to_string() } else { e.message() };
            on_reply(FromWorker::Error { run: 0, message: format!("the inference worker stopped: {what}") });
        });
        worker.set_onerror(Some(on_err.as_ref().unchecked_ref()));
        on_err.forget();
        Ok(client)
    }

    pub fn send(&self, msg: ToWorker) {
        let mut inner = self.0.borrow_mut();
        if !inner.ready {
            inner.queue.push(msg);
            return;
        }
        if let Err(e) = inner.worker.post_message(&to_js(&msg)) {
            web_sys::console::error_2(&"postMessage to the worker failed".into(), &e);
        }
    }
}
