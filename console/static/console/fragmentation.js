// The fragmentation page's charts: per shape, copies that could start (solid) against copies
// the free GPUs would hold together (dashed), from each canvas's json_script series.
(function () {
  "use strict";
  var palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
  document.querySelectorAll("canvas[data-nc-fragmentation]").forEach(function (canvas) {
    var data = JSON.parse(document.getElementById(canvas.dataset.ncFragmentation).textContent);
    var datasets = [];
    data.shapes.forEach(function (series, i) {
      var colour = palette[i % palette.length];
      datasets.push({ label: "could start: " + series.shape, data: series.startable,
        borderColor: colour, backgroundColor: colour, pointRadius: 0 });
      datasets.push({ label: "would hold: " + series.shape, data: series.would_hold,
        borderColor: colour, backgroundColor: colour, borderDash: [6, 4], pointRadius: 0 });
    });
    new Chart(canvas, {
      type: "line",
      data: { labels: data.times, datasets: datasets },
      options: {
        maintainAspectRatio: false,
        animation: false,
        scales: { y: { beginAtZero: true, title: { display: true, text: "copies of the shape" } } },
      },
    });
  });
})();
