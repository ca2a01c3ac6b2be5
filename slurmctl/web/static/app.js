// slurmctl web: live refresh, the log tail and the cancel progress. Plain DOM, no framework, no
// innerHTML: every value from the server is set as text.
"use strict";

function getJSON(url) {
  return fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
    if (!r.ok) { throw new Error(r.status + " " + r.statusText); }
    return r.json();
  });
}

function withParams(url, params) {
  var u = new URL(url, window.location.origin);
  Object.keys(params).forEach(function (k) { u.searchParams.set(k, params[k]); });
  return u.pathname + u.search;
}

function setupLive() {
  var box = document.getElementById("live");
  if (!box) { return; }
  var seconds = parseInt(box.dataset.interval || "10", 10);
  var key = "slurmctl-live:" + window.location.pathname;
  if (sessionStorage.getItem(key) !== null) { box.checked = sessionStorage.getItem(key) === "1"; }
  box.addEventListener("change", function () { sessionStorage.setItem(key, box.checked ? "1" : "0"); });
  setInterval(function () {
    var typing = document.activeElement && document.activeElement.tagName === "INPUT" && document.activeElement.type !== "checkbox";
    var ticked = document.querySelectorAll("input[name=run]:checked").length > 0;
    if (box.checked && !typing && !ticked) { window.location.reload(); }
  }, seconds * 1000);
}

function setupLog() {
  var form = document.getElementById("log-form");
  if (!form) { return; }
  var pre = document.getElementById("log-tail");
  var rank = document.getElementById("log-rank");
  var follow = document.getElementById("log-follow");
  function load() {
    getJSON(withParams(form.dataset.url, { rank: rank.value, lines: "200" })).then(function (data) {
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = data.lines.length ? data.lines.join("\n") : (data.exists ? "(empty)" : "(no log yet: the job has not started writing)");
      if (atBottom || follow.checked) { pre.scrollTop = pre.scrollHeight; }
      pre.dataset.loaded = String(Date.now());
    }).catch(function (e) { pre.textContent = "could not read the log: " + e.message; });
  }
  rank.addEventListener("change", load);
  load();
  setInterval(function () { if (follow.checked) { load(); } }, 2000);
}

function setupCancel() {
  var status = document.getElementById("cancel-status");
  if (!status || status.dataset.state === "done" || status.dataset.state === "error") { return; }
  var timer = setInterval(function () {
    getJSON(status.dataset.url).then(function (data) {
      if (!data) { return; }
      status.textContent = data.message + (data.state === "draining" ? " (" + data.waited + " s)" : "");
      status.className = "cancel-" + data.state;
      status.dataset.state = data.state;
      if (data.state === "done" || data.state === "error") { clearInterval(timer); }
    }).catch(function () {});
  }, 1000);
}

document.addEventListener("DOMContentLoaded", function () { setupLive(); setupLog(); setupCancel(); });
