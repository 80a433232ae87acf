// AIGC Hub console: confirmations, the live dashboard (polling + sparklines), job progress.
// Vanilla JS, no build step; every page works without it except the live parts.
"use strict";

function formatAge(seconds) {
  if (seconds < 1) return Math.round(seconds * 1000) + " ms";
  if (seconds < 60) return seconds.toFixed(1) + " s";
  const m = Math.floor(seconds / 60), s = Math.floor(seconds % 60);
  if (m < 60) return m + " min " + s + " s";
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}

function show(el, value) {
  if (el.dataset.format === "age") el.textContent = formatAge(value);
  else if (el.dataset.format === "breach")
    el.innerHTML = value ? '<span class="status dismissed">over threshold</span>'
                         : '<span class="status replayed">ok</span>';
  else el.textContent = String(value);
}

// A sparkline of the last samples on a <canvas>: a line, a light fill, the max as a label.
function spark(canvas, values) {
  const ratio = window.devicePixelRatio || 1, w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = w * ratio; canvas.height = h * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, w, h);
  if (values.length < 2) return;
  const max = Math.max(1, ...values), step = w / (values.length - 1);
  const y = (v) => h - 4 - (v / max) * (h - 16);
  g.beginPath();
  values.forEach((v, i) => (i ? g.lineTo(i * step, y(v)) : g.moveTo(0, y(v))));
  g.strokeStyle = "#2456c7"; g.lineWidth = 1.5; g.stroke();
  g.lineTo(w, h); g.lineTo(0, h); g.closePath();
  g.fillStyle = "rgba(36, 86, 199, 0.08)"; g.fill();
  g.fillStyle = "#6b7385"; g.font = "10px system-ui"; g.fillText("max " + Math.round(max * 10) / 10, 2, 10);
}

function dashboard(root) {
  const url = root.dataset.statsUrl, history = {}, keep = 90;
  let previous = null;
  async function poll() {
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" } });
      if (response.status === 401) { window.location.reload(); return; }
      const s = await response.json();
      if (previous && s.at_ms > previous.at_ms) {
        const dt = (s.at_ms - previous.at_ms) / 1000;
        s.consumed_rate = Math.round(Math.max(0, s.consumed - previous.consumed) / dt * 10) / 10;
        s.produced_rate = Math.round(Math.max(0, s.produced - previous.produced) / dt * 10) / 10;
      }
      previous = s;
      document.querySelectorAll("[data-field]").forEach((el) => {
        const name = el.dataset.field;
        if (name === "at") el.textContent = new Date(s.at_ms).toISOString().replace("T", " ").slice(0, 23);
        else if (name === "unreachable") el.hidden = s.broker_reachable;
        else if (s[name] !== undefined) show(el, s[name]);
      });
      s.lag.forEach((row) => {
        const tr = document.querySelector(`tr[data-row="${CSS.escape(row.group + "/" + row.topic)}"]`);
        if (tr) tr.querySelectorAll("[data-cell]").forEach((el) => show(el, row[el.dataset.cell]));
      });
      root.querySelectorAll("canvas[data-chart]").forEach((canvas) => {
        const name = canvas.dataset.chart, series = (history[name] = history[name] || []);
        if (s[name] !== undefined) series.push(s[name]);
        if (series.length > keep) series.shift();
        spark(canvas, series);
      });
    } catch (err) {
      console.warn("dashboard poll failed", err);
    }
  }
  poll();
  setInterval(poll, 2000);
}

function jobProgress(root) {
  const url = root.dataset.jobUrl, bar = root.querySelector("progress");
  async function poll() {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const job = await response.json();
    bar.max = Math.max(1, job.total);
    bar.value = job.done + job.failed;
    root.querySelectorAll("[data-field]").forEach((el) => show(el, job[el.dataset.field]));
    if (job.status !== "done" && job.status !== "failed") setTimeout(poll, 500);
  }
  poll();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-confirm]").forEach((form) =>
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    }));
  const dash = document.querySelector("[data-stats-url]");
  if (dash) dashboard(dash);
  const job = document.querySelector("[data-job-url]");
  if (job) jobProgress(job);
});
