// For a page that embeds the widget with <iframe src=".../embed.html?...">
// and may run one script: fits every such frame to the height its widget
// posts (www/embed.js), on load and whenever the widget grows or shrinks.
// Add once, anywhere on the page: <script src=".../www/embed-host.js" async></script>
const MAX_HEIGHT = 10000;

addEventListener('message', (ev) => {
  const m = ev.data;
  if (m?.type !== 'nrgpt-embed-height' || !Number.isFinite(m.height) || m.height <= 0) return;
  for (const frame of document.querySelectorAll('iframe')) {
    // CSSOM, not a style attribute: allowed under a strict style-src
    if (frame.contentWindow === ev.source) frame.style.height = `${Math.min(Math.ceil(m.height), MAX_HEIGHT)}px`;
  }
});
