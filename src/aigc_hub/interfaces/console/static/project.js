// AIGC Hub console project page: draws the timeline (clips on tracks at their in/out
// points, texts, audio), lets a clip be moved within its track and trimmed, saves the
// edited document (the same TimelineV1 the API takes) as a new revision, exports it and
// plays the result. Clips of a track are packed one after the other after an edit, a
// crossfade overlapping the clip before by its duration; the output lasts until the last
// element ends. The server checks everything again (409 stale revision, 422 naming what).
"use strict";

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function repack(doc) {
  let end = 0;
  doc.tracks.forEach((track) => {
    let previous = null;
    track.clips.forEach((clip, i) => {
      const length = clip.out_ms - clip.in_ms;
      if (i === 0) {
        delete clip.transition_in;
        clip.at_ms = track.start_ms;
      } else {
        const before = previous.out_ms - previous.in_ms;
        let fade = clip.transition_in ? clip.transition_in.duration_ms : 0;
        if (fade) {
          fade = Math.min(fade, length, before);
          clip.transition_in.duration_ms = fade;
        }
        clip.at_ms = previous.at_ms + before - fade;
      }
      previous = clip;
      end = Math.max(end, clip.at_ms + length);
    });
  });
  (doc.texts || []).forEach((t) => { end = Math.max(end, t.end_ms); });
  (doc.audio || []).forEach((a) => { end = Math.max(end, a.at_ms + a.out_ms - a.in_ms); });
  doc.output.duration_ms = end;
}

function draw(editor, doc) {
  const lanes = editor.querySelector("#lanes");
  const total = doc.output.duration_ms;
  const pct = (ms) => (100 * ms / total).toFixed(3) + "%";
  lanes.replaceChildren();
  doc.tracks.forEach((track) => {
    const lane = el("div", { class: "lane", "data-testid": "track-" + track.id });
    lane.append(el("span", { class: "lane-name mono small" }, track.id));
    track.clips.forEach((clip, i) => {
      const block = el("div", { class: "clip", "data-testid": "clip-" + clip.id });
      block.style.left = pct(clip.at_ms);
      block.style.width = pct(clip.out_ms - clip.in_ms);
      block.title = `${clip.id}: ${clip.in_ms}–${clip.out_ms} ms of ${clip.asset_id}`;
      const label = el("span", { class: "mono small", "data-testid": "clip-label-" + clip.id },
        `${clip.id} @${(clip.at_ms / 1000).toFixed(2)}s${clip.transition_in ? " ⤫" : ""}`);
      const inField = el("input", { type: "number", min: "0", step: "100", value: clip.in_ms,
        "aria-label": clip.id + " in (ms)", "data-testid": "in-" + clip.id });
      const outField = el("input", { type: "number", min: "1", step: "100", value: clip.out_ms,
        "aria-label": clip.id + " out (ms)", "data-testid": "out-" + clip.id });
      const trim = () => {
        clip.in_ms = Number(inField.value);
        clip.out_ms = Number(outField.value);
        changed(editor, doc);
      };
      inField.addEventListener("change", trim);
      outField.addEventListener("change", trim);
      const left = el("button", { type: "button", "aria-label": "move " + clip.id + " earlier",
        "data-testid": "earlier-" + clip.id }, "◀");
      left.disabled = i === 0;
      left.addEventListener("click", () => {
        [track.clips[i - 1], track.clips[i]] = [track.clips[i], track.clips[i - 1]];
        changed(editor, doc);
      });
      block.append(label, el("br"), inField, outField, left);
      lane.append(block);
    });
    lanes.append(lane);
  });
  const extra = [
    ...(doc.texts || []).map((t) => ["text", t.id, t.start_ms, t.end_ms, t.text]),
    ...(doc.audio || []).map((a) => ["audio", a.id, a.at_ms, a.at_ms + a.out_ms - a.in_ms,
      `${a.gain_db} dB`]),
  ];
  extra.forEach(([kind, id, start, end, what]) => {
    const lane = el("div", { class: "lane " + kind, "data-testid": kind + "-" + id });
    lane.append(el("span", { class: "lane-name mono small" }, kind));
    const block = el("div", { class: "clip " + kind }, `${id}: ${what}`);
    block.style.left = pct(start);
    block.style.width = pct(end - start);
    lane.append(block);
    lanes.append(lane);
  });
  editor.querySelector("[data-testid=duration]").textContent = (total / 1000).toFixed(2);
}

function changed(editor, doc) {
  repack(doc);
  draw(editor, doc);
  editor.querySelector("#save-state").textContent = "unsaved changes";
}

async function call(editor, path, body) {
  const answer = await fetch(editor.dataset.base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": editor.dataset.csrf },
    body: JSON.stringify(body),
  });
  let data = {};
  try { data = await answer.json(); } catch (err) { data = { detail: answer.statusText }; }
  return [answer.status, data];
}

function trackStarts(doc) {
  doc.tracks.forEach((t) => { t.start_ms = t.clips.length ? t.clips[0].at_ms : 0; });
}

function withoutStarts(doc) {
  const copy = JSON.parse(JSON.stringify(doc));
  copy.tracks.forEach((t) => { delete t.start_ms; });
  return copy;
}

function newKey() {
  if (window.crypto && window.crypto.randomUUID) return window.crypto.randomUUID();
  return Date.now().toString(36) + Math.random().toString(36).slice(2);
}

function showResult(state, found) {
  const screen = document.getElementById("export-screen");
  const button = el("button", { type: "button", class: "play", "data-play-url": found.play_url,
    "data-play-type": found.play_type || "", "data-task": "export",
    "data-testid": "play-export" }, "▶ Play");
  screen.replaceChildren(button);
  button.addEventListener("click", () => startPlayer(button));
  state.textContent = `succeeded: ${found.nodes_ran} nodes ran, ${found.nodes_reused} reused`;
}

async function follow(editor, exportId) {
  const state = document.getElementById("export-state");
  const bar = document.getElementById("export-progress");
  const path = `${editor.dataset.base}/projects/${editor.dataset.project}/exports/${exportId}.json`;
  for (;;) {
    const answer = await fetch(path);
    const found = await answer.json();
    if (!answer.ok) { state.textContent = "error: " + found.detail; return; }
    bar.value = found.progress;
    if (found.status === "succeeded") { showResult(state, found); return; }
    if (found.status === "failed" || found.status === "cancelled") {
      state.textContent = found.status + (found.failed_node ? " at " + found.failed_node : "") +
        (found.status_reason ? ": " + found.status_reason : "");
      return;
    }
    state.textContent = `${found.status} ${found.current_node || ""}`.trim();
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const editor = document.getElementById("editor");
  if (!editor) return;
  const doc = JSON.parse(document.getElementById("timeline-doc").textContent);
  trackStarts(doc);
  draw(editor, doc);
  editor.querySelector("#save").addEventListener("click", async () => {
    const saveState = editor.querySelector("#save-state");
    const base = Number(editor.dataset.revision);
    const path = `/projects/${editor.dataset.project}/revisions`;
    const [status, data] = await call(editor, path, { base_revision: base,
      timeline: withoutStarts(doc) });
    if (status === 201) {
      editor.dataset.revision = data.number;
      document.querySelector("[data-testid=revision]").textContent = data.number;
      saveState.textContent = "saved as revision " + data.number;
    } else {
      saveState.textContent = `not saved (${status}): ${data.detail}`;
    }
  });
  document.getElementById("export").addEventListener("click", async () => {
    const state = document.getElementById("export-state");
    const profile = document.getElementById("profile").value;
    const path = `/projects/${editor.dataset.project}/exports`;
    const [status, data] = await call(editor, path, { profile: profile,
      revision: Number(editor.dataset.revision), idempotency_key: newKey() });
    if (status !== 202) { state.textContent = `not exported (${status}): ${data.detail}`; return; }
    state.textContent = "queued";
    follow(editor, data.export_id);
  });
});
