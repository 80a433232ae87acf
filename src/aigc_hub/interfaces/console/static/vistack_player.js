// AIGC Hub console, vistack's video page: plays the DASH manifest with dash.js (vendored:
// static/vendor/dash.all.min.js) and overlays the danmaku: those of the playback window
// (danmaku.json, fetched ahead as the video plays) when the current time reaches their
// offset, and live ones (the SSE feed) as they arrive. The video's data-state says what
// happened ("loading", "playing", "error: …") so people and tests can read it.
"use strict";

const MAX_ON_SCREEN = 200;

function startVideoPage(video) {
  const layer = document.querySelector("[data-testid=danmaku-layer]");
  const windowMs = Number(video.dataset.windowMs || 30000);
  const seen = new Set();
  let pending = [];
  let fetchedTo = 0;
  let lanes = 0;

  const fail = (message) => { video.dataset.state = "error: " + message; };
  if (!window.dashjs) { fail("dash.js did not load"); return; }
  const player = window.dashjs.MediaPlayer().create();
  window.vistackPlayer = player;
  player.on(window.dashjs.MediaPlayer.events.ERROR, (e) => fail(JSON.stringify(e.error || e)));
  video.addEventListener("playing", () => { video.dataset.state = "playing"; });
  player.initialize(video, video.dataset.manifest, true);

  function show(d) {
    const el = document.createElement("div");
    el.className = "danmaku " + d.mode;
    el.textContent = d.text;
    el.style.color = d.color;
    el.dataset.testid = "danmaku";
    el.setAttribute("data-testid", "danmaku");
    el.dataset.id = d.danmakuId;
    el.style.top = (d.mode === "bottom" ? 80 : (lanes++ % 8) * 10) + "%";
    layer.append(el);
    while (layer.childElementCount > MAX_ON_SCREEN) layer.firstElementChild.remove();
  }

  function add(d, now) {
    if (seen.has(d.danmakuId)) return;
    seen.add(d.danmakuId);
    if (now) show(d); else pending.push(d);
  }

  async function fetchAhead() {
    const from = fetchedTo;
    const to = Math.max(fetchedTo, Math.floor(video.currentTime * 1000)) + windowMs;
    fetchedTo = to;
    try {
      const answer = await fetch(`${video.dataset.danmaku}?from=${from}&to=${to}`);
      if (answer.ok) (await answer.json()).items.forEach((d) => add(d, false));
    } catch (err) { fetchedTo = from; }
  }

  video.addEventListener("timeupdate", () => {
    const nowMs = video.currentTime * 1000;
    const due = pending.filter((d) => d.offsetMs <= nowMs);
    pending = pending.filter((d) => d.offsetMs > nowMs);
    due.forEach(show);
    if (nowMs + windowMs / 2 > fetchedTo) fetchAhead();
  });
  fetchAhead();

  const live = new EventSource(video.dataset.live);
  live.addEventListener("danmaku", (e) => add(JSON.parse(e.data), true));
  live.addEventListener("ready", () => {});
}

document.addEventListener("DOMContentLoaded", () => {
  const video = document.querySelector("video[data-manifest]");
  if (video) startVideoPage(video);
});
