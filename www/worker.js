// The inference worker's bootstrap: the same wasm module as the page, started
// at the worker entry point (src/web/worker.rs). The page sends nothing
// before the worker says Ready, so no message can arrive before the handler.
import init, { worker_main } from './pkg/nrgpt_web.js';

try {
  await init();
  worker_main();
} catch (e) {
  self.postMessage({ type: 'Error', run: 0, message: 'the inference worker could not start its wasm: ' + e });
}
