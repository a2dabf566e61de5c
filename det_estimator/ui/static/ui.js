// det-estimator's pages: refresh the parts marked data-live, draw the charts, follow a trial's log.
// Every text that comes from the store is put in the page as text (textContent) or was escaped
// by the server; nothing here builds HTML from data.
"use strict";

(function () {
  const refreshSeconds = Number(document.body.dataset.refreshSeconds || 0);

  // The page's live parts, fetched again from its own URL and swapped in place.
  async function refreshLiveParts() {
    const response = await fetch(window.location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const part of document.querySelectorAll("[data-live]")) {
      const replacement = fresh.getElementById(part.id);
      if (replacement) part.replaceWith(document.importNode(replacement, true));
    }
  }

  // Charts: Plotly figures whose data the server builds (see det_estimator/ui/_views.py).
  let chartsJson = "";
  let charts = null;
  let drawnForState = "";

  function drawCurves() {
    const select = document.getElementById("curve-metric");
    const target = document.getElementById("curves");
    if (!charts || !select || !target) return;
    const chosen = charts.curves.find((curve) => curve.label === select.value) || charts.curves[0];
    if (!chosen) {
      target.textContent = "No metrics recorded yet.";
      return;
    }
    const logScale = document.getElementById("log-scale").checked;
    Plotly.react(target, chosen.traces, {
      title: { text: chosen.title },
      xaxis: { title: { text: "batches" } },
      yaxis: { type: logScale ? "log" : "linear" },
      hovermode: "closest",
      margin: { t: 40 },
      legend: { orientation: "v" },
    }, { responsive: true, displaylogo: false });
  }

  function fillMetricChoice() {
    const select = document.getElementById("curve-metric");
    if (!select) return;
    const current = select.value;
    const labels = charts.curves.map((curve) => curve.label);
    if (Array.from(select.options).map((option) => option.value).join("\n") !== labels.join("\n")) {
      select.replaceChildren();
      for (const label of labels) {
        const option = document.createElement("option");
        option.value = label;
        option.textContent = label;
        select.appendChild(option);
      }
    }
    const preferred = labels.find((label) => label === "validation " + charts.metric);
    select.value = labels.includes(current) ? current : (preferred || labels[0] || "");
  }

  function drawSearch() {
    const parcoords = document.getElementById("parcoords");
    if (parcoords && charts.parcoords) {
      Plotly.react(parcoords, [charts.parcoords], { margin: { t: 60, l: 80, r: 80 } }, { displaylogo: false });
    } else if (parcoords) {
      parcoords.textContent = "No trial has a value of the searcher metric yet.";
    }
    const scatter = document.getElementById("scatter");
    if (!scatter) return;
    charts.scatter.forEach((entry, index) => {
      let cell = document.getElementById("scatter-" + index);
      if (!cell) {
        cell = document.createElement("div");
        cell.id = "scatter-" + index;
        cell.className = "chart small";
        scatter.appendChild(cell);
      }
      Plotly.react(cell, [entry.trace], {
        title: { text: entry.title },
        xaxis: { title: { text: entry.trace.name }, type: entry.xaxis_type },
        yaxis: { title: { text: charts.metric_title } },
        margin: { t: 40 },
        showlegend: false,
      }, { displayModeBar: false });
    });
  }

  async function refreshCharts(first) {
    const curves = document.getElementById("curves");
    if (!curves || typeof Plotly === "undefined") return;
    // Once drawn, the charts of an experiment that no longer runs do not change: a large
    // search's data is not fetched again every few seconds for nothing.
    const state = document.getElementById("experiment-state");
    const now = state ? state.textContent : "";
    if (!first && charts && now !== "ACTIVE" && drawnForState === now) return;
    drawnForState = now;
    const response = await fetch(curves.dataset.charts, { credentials: "same-origin" });
    const text = await response.text();
    if (!response.ok) {
      curves.textContent = (JSON.parse(text) || {}).error || "The charts cannot be drawn now.";
      return;
    }
    if (text === chartsJson) return;
    chartsJson = text;
    charts = JSON.parse(text);
    fillMetricChoice();
    drawCurves();
    drawSearch();
    document.body.dataset.chartsDrawn = "1";
  }

  // A trial's log: what it printed since the last look, appended as text.
  async function followLog() {
    const log = document.getElementById("log");
    if (!log) return;
    const response = await fetch(log.dataset.log + "?offset=" + log.dataset.offset, { credentials: "same-origin" });
    if (!response.ok) return;
    const chunk = await response.json();
    if (chunk.text) {
      const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.appendChild(document.createTextNode(chunk.text));
      if (atBottom) log.scrollTop = log.scrollHeight;
    }
    log.dataset.offset = String(chunk.offset);
  }

  function every(seconds, work) {
    if (!seconds) return;
    const tick = async () => {
      try {
        await work();
      } catch (error) {
        // The server may be restarting: the next tick tries again.
      }
      window.setTimeout(tick, seconds * 1000);
    };
    window.setTimeout(tick, seconds * 1000);
  }

  window.addEventListener("DOMContentLoaded", () => {
    const select = document.getElementById("curve-metric");
    if (select) select.addEventListener("change", drawCurves);
    const logScale = document.getElementById("log-scale");
    if (logScale) logScale.addEventListener("change", drawCurves);
    const log = document.getElementById("log");
    if (log) log.scrollTop = log.scrollHeight;
    refreshCharts(true).catch(() => {});
    every(refreshSeconds, refreshLiveParts);
    every(refreshSeconds, () => refreshCharts(false));
    every(refreshSeconds, followLog);
  });
})();
