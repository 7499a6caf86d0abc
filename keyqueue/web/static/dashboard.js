// keyqueue dashboard: refreshes the part of the page named by <body data-refresh
// data-target> every 2 seconds (server-rendered HTML, swapped in), and asks for a
// confirmation before any action form is sent. No framework, no build step.
(function () {
  "use strict";
  var REFRESH_MS = 2000;
  var body = document.body;
  var live = document.getElementById("live");

  function setLive(state, text) {
    if (!live) return;
    live.dataset.state = state;
    live.textContent = text;
  }

  // after a swap: the overview's queue count follows its rows; a button with data-needs="dead"
  // is enabled while the refreshed count says there are some
  function afterSwap() {
    var count = document.getElementById("queue-count");
    if (count) count.textContent = String(document.querySelectorAll("#overview-rows tr[data-queue]").length);
    document.querySelectorAll("button[data-needs]").forEach(function (button) {
      var n = document.querySelector('#tiles [data-k="' + button.dataset.needs + '"]');
      if (n) button.disabled = n.textContent.trim() === "0";
    });
  }

  function refresh() {
    var url = body.dataset.refresh;
    var target = document.getElementById(body.dataset.target || "");
    if (!url || !target) return;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.ok) {
          return r.text().then(function (html) { target.innerHTML = html; afterSwap(); setLive("ok", "live"); });
        }
        if (r.status === 503) { setLive("down", "Redis unreachable"); return; }
        if (r.status === 401 || r.redirected) { setLive("down", "logged out"); return; }
        setLive("down", "error " + r.status);
      })
      .catch(function () { setLive("down", "dashboard unreachable"); })
      .finally(function () { window.setTimeout(refresh, REFRESH_MS); });
  }

  var dialog = document.getElementById("confirm-dialog");
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.dataset || !form.dataset.confirm || !dialog || !dialog.showModal) return;
    event.preventDefault();
    var source = form.querySelector("select[name=source]");
    var title = form.dataset.confirm;
    if (source) title = title.replace("messages of", (source.value === "all" ? "every message" : "the " + source.value + " messages") + " of");
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-detail").textContent = form.dataset.detail || "";
    var ok = document.getElementById("confirm-ok");
    ok.className = form.dataset.danger ? "danger" : "primary";
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue !== "ok") return;
      form.querySelector("input[name=confirm]").value = "1";
      form.submit();
    };
    dialog.showModal();
  });

  if (body.dataset.refresh) window.setTimeout(refresh, REFRESH_MS);
})();
