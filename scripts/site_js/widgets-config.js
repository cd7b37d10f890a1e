// Loaded after require.js and before the widgets' embed-amd.js (see nb_ipywidgets_js in
// _config.yml), on pages whose notebooks saved widget state.
(function () {
  // The folder this file was served from, e.g. ".../_static/jupyter-widgets/".
  var here = document.currentScript.src.replace(/[^/]*$/, "");

  // Tell require.js where this site keeps the front-end modules that saved widget states name,
  // so that the HTML manager finds them here instead of asking a CDN.
  window.requirejs.config({
    paths: {
      // The HTML manager loads its icon fonts from the folder of this module id's address;
      // without this, that is a folder next to the page, which does not exist.
      "@jupyter-widgets/html-manager/dist": here.replace(/\/$/, ""),
      // The same for the modules it defines itself (@jupyter-widgets/base, /controls, ...),
      // whose styles load the same fonts relative to their own ids.
      "@jupyter-widgets": here.replace(/\/$/, ""),
      // anywidget's front end (its AMD build, copied from the anywidget Python package).
      anywidget: here + "anywidget/index",
    },
  });

  // The widgets typeset their labels with MathJax 2's MathJax.Hub.Queue, which MathJax 3 (the
  // version Sphinx loads) does not have: without this, rendering a widget throws on pages with
  // maths. MathJax is loaded with `defer`, so it is in place by DOMContentLoaded, and the
  // widgets are rendered later, on `load`.
  document.addEventListener("DOMContentLoaded", function () {
    var mathjax = window.MathJax;
    if (!mathjax || mathjax.Hub || !mathjax.typesetPromise) return;
    mathjax.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (job) {
          if (Array.isArray(job) && job[0] === "Typeset" && job[2]) {
            mathjax.startup.promise.then(function () {
              return mathjax.typesetPromise([job[2]]);
            });
          }
        });
      },
    };
  });
})();
