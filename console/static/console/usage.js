// The usage page's two charts, from the series the page embeds (json_script "nc-usage-data").
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("nc-usage-data").textContent);
  function draw(id, series) {
    new Chart(document.getElementById(id), {
      type: "bar",
      data: { labels: data.days, datasets: series },
      options: {
        maintainAspectRatio: false,
        animation: false,
        scales: {
          x: { stacked: true },
          y: { stacked: true, title: { display: true, text: "GPU-hours" } },
        },
      },
    });
  }
  draw("nc-chart-project", data.by_project);
  draw("nc-chart-model", data.by_model);
})();
