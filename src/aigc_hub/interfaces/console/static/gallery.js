// AIGC Hub console gallery: a play button swaps a task's poster for a <video>.
// HLS goes through hls.js (vendored: static/vendor/hls.min.js) where the browser has MSE,
// else the browser's own HLS (Safari); a plain video URL (an MP4 proxy) plays natively.
// The video's data-state says what happened ("loading", "playing", "error: …") so people
// and tests can read it.
"use strict";

const HLS_TYPES = ["application/vnd.apple.mpegurl", "application/x-mpegurl"];

function fail(video, message) {
  video.dataset.state = "error: " + message;
  const note = document.createElement("p");
  note.className = "error small";
  note.setAttribute("role", "alert");
  note.textContent = "Cannot play: " + message;
  video.after(note);
}

function startPlayer(button) {
  const screen = button.closest(".screen");
  const url = button.dataset.playUrl, type = (button.dataset.playType || "").toLowerCase();
  const video = document.createElement("video");
  video.controls = true;
  // Muted, so the browser's autoplay policy never blocks play(); the controls unmute.
  video.muted = true;
  video.playsInline = true;
  video.dataset.state = "loading";
  video.setAttribute("data-testid", "video-" + button.dataset.task);
  const poster = screen.querySelector("img");
  if (poster) video.poster = poster.src;
  screen.replaceChildren(video);
  video.addEventListener("playing", () => { video.dataset.state = "playing"; });
  const play = () => video.play().catch((err) => fail(video, err.message));

  if (HLS_TYPES.includes(type) && window.Hls && window.Hls.isSupported()) {
    const hls = new window.Hls();
    hls.on(window.Hls.Events.MANIFEST_PARSED, play);
    hls.on(window.Hls.Events.ERROR, (_event, data) => {
      if (data.fatal) { fail(video, data.type + " " + data.details); hls.destroy(); }
    });
    hls.loadSource(url);
    hls.attachMedia(video);
  } else if (video.canPlayType(type || "video/mp4")) {
    video.src = url;
    video.addEventListener("error", () => fail(video, "the browser refused the media"));
    play();
  } else {
    fail(video, "this browser plays neither HLS through MSE nor " + (type || "this type"));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("button[data-play-url]").forEach((button) =>
    button.addEventListener("click", () => startPlayer(button)));
});
