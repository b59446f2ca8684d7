//! The page's handle on the inference worker: starts it, queues messages
//! until its wasm is ready and hands every reply to one callback. The page is
//! the worker's session 0, the session of a message that names none
//! (protocol.rs: `InSession`), so its messages go without the field.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::*;
use web_sys::{MessageEvent, Worker, WorkerOptions, WorkerType};

use super::protocol::{from_js, to_js, FromWorker, ToWorker};

thread_local! {
    /// The worker bootstrap: www/boot.js gives its URL (versioned in dist/) to `start_page`.
    static WORKER_URL: RefCell<String> = RefCell::new("www/worker.js".into());
}

/// Where `Client::start` finds the worker (set once, before the page mounts).
pub fn set_worker_url(url: String) {
    WORKER_URL.with(|w| *w.borrow_mut() = url);
}

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
        let url = WORKER_URL.with(|w| w.borrow().clone());
        let worker = Worker::new_with_options(&url, &opts).map_err(|e| format!("could not start the inference worker ({url}): {e:?}"))?;
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
