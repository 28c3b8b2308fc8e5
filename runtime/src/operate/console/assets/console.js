// async-exec console: pages that mark themselves with `data-refresh="<seconds>"` are
// fetched again while open and their content replaced, unless the tab is hidden, a field
// has the focus, a box is ticked or text is selected (nothing typed or chosen is lost).
// No other script; the console works without it.
(function () {
  var marker = document.querySelector("[data-refresh]");
  if (!marker) return;
  var seconds = Math.max(2, parseInt(marker.getAttribute("data-refresh"), 10) || 10);
  function busy() {
    var active = document.activeElement;
    if (active && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(active.tagName)) return true;
    if (document.querySelector("input[type=checkbox]:checked")) return true;
    var selection = window.getSelection && window.getSelection();
    return !!(selection && !selection.isCollapsed);
  }
  var timer = setInterval(function () {
    if (document.visibilityState !== "visible" || busy()) return;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok || response.redirected) { clearInterval(timer); return null; }
        return response.text();
      })
      .then(function (text) {
        if (text === null || busy()) return;
        var page = new DOMParser().parseFromString(text, "text/html");
        var fresh = page.querySelector("main");
        var main = document.querySelector("main");
        if (fresh && main) {
          main.innerHTML = fresh.innerHTML;
          main.setAttribute("data-refreshed", new Date().toISOString());
        }
      })
      .catch(function () { /* the next round tries again */ });
  }, seconds * 1000);
})();
